package forge

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/internal/numfmt"
)

// The memory budget.
//
// Every tensor forge allocates (creation, op outputs, gradients, on every
// device) is checked against a budget before its memory is asked for, so
// that a mistyped shape such as Zeros(100000, 100000) (37 GiB) panics with
// an *Error naming the size and the budget instead of ending the process
// with "fatal error: runtime: out of memory". The budget is, in order:
//
//   - the bytes given to SetMemoryBudget, if any;
//   - on a device that knows its own budget (Metal: the GPU's recommended
//     working set), that budget;
//   - the memory the system can give without swapping plus what forge
//     already holds (Linux: MemAvailable of /proc/meminfo; macOS: the
//     physical memory).
//
// An allocation is refused when the device's live tensor memory plus the
// request would pass the budget. Requests under budgetMinBytes are not
// checked (they cannot end the process by themselves, and checking them
// would cost every small op a lock).

// budgetMinBytes is the smallest request checked against the budget.
const budgetMinBytes = 1 << 20

// userBudget is the budget set by SetMemoryBudget (0: the default).
var userBudget struct {
	sync.Mutex
	bytes int64
}

// SetMemoryBudget sets the most memory, in bytes, that the tensors of one
// device may hold at once; an allocation that would pass it panics with an
// *Error. 0 restores the default (the device's own budget, or the
// available RAM). A negative value panics.
func SetMemoryBudget(bytes int64) {
	if bytes < 0 {
		panic(errorf("set_memory_budget", "negative budget %d; give the bytes, or 0 for the default", bytes))
	}
	userBudget.Lock()
	userBudget.bytes = bytes
	userBudget.Unlock()
}

// MemoryBudget reports the budget that allocations on the default device
// are checked against, in bytes, and where it comes from ("set", "device"
// or "available RAM"); 0 and "" when no budget is known.
func MemoryBudget() (bytes int64, source string) {
	d := DefaultDevice()
	b, src := d.memoryBudget(d.b.Memory(), true)
	return b, src.short
}

// budgetSource says where a budget comes from: short for MemoryBudget,
// long for the refusal's message.
type budgetSource struct{ short, long string }

var (
	fromSet    = budgetSource{"set", "set with forge.SetMemoryBudget or :set budget"}
	fromDevice = budgetSource{"device", "the device's memory budget"}
	fromRAM    = budgetSource{"available RAM", "available RAM"}
)

// sysAvail caches the system's available memory plus what forge held when
// it was read: that sum changes little as forge allocates (what forge
// takes, the system no longer has), so it is read again only after
// sysAvailTTL or before refusing an allocation.
var sysAvail struct {
	sync.Mutex
	bytes int64 // available + held at read time; 0: unknown
	at    time.Time
}

const sysAvailTTL = time.Second

// memoryBudget is the budget of d's allocations, given st, d's memory
// now; fresh reads the system's available memory again instead of using
// the cached value.
func (d *Device) memoryBudget(st backend.MemoryStats, fresh bool) (int64, budgetSource) {
	userBudget.Lock()
	set := userBudget.bytes
	userBudget.Unlock()
	if set > 0 {
		return set, fromSet
	}
	if st.Budget > 0 {
		src := fromDevice
		src.long = "the " + d.name + " device's memory budget"
		return st.Budget, src
	}
	sysAvail.Lock()
	defer sysAvail.Unlock()
	if fresh || sysAvail.bytes == 0 || time.Since(sysAvail.at) > sysAvailTTL {
		sysAvail.bytes = 0
		if avail, ok := AvailableMemory(); ok {
			if runtime.GOOS == "linux" {
				avail += st.Held // what forge holds is available to it too
			}
			sysAvail.bytes = avail
		}
		sysAvail.at = time.Now()
	}
	if sysAvail.bytes == 0 {
		return 0, budgetSource{}
	}
	return sysAvail.bytes, fromRAM
}

// checkBudget panics with an *Error if allocating a dt tensor of shape on
// dev would pass the memory budget (see the doc above). op names the
// allocation for the message.
func checkBudget(op string, dev *Device, dt DType, shape []int) {
	checkBudgetStaged(op, dev, dt, shape, 0)
}

// checkBudgetStaged is checkBudget for a tensor whose values are first
// made on the host, staged bytes an element, before the tensor exists.
func checkBudgetStaged(op string, dev *Device, dt DType, shape []int, staged int) {
	need := int64(numel(shape)) * int64(dt.Size()+staged)
	if need < budgetMinBytes {
		return
	}
	st := dev.b.Memory()
	budget, src := dev.memoryBudget(st, false)
	if budget == 0 || st.Live+need <= budget {
		return
	}
	// Over: look again before refusing, with the memory of unreachable
	// tensors returned and the system's memory read now.
	dev.b.Recycle()
	st = dev.b.Memory()
	budget, src = dev.memoryBudget(st, true)
	live := st.Live
	if budget == 0 || live+need <= budget {
		return
	}
	held := ""
	if live > 0 {
		held = ", with " + numfmt.Bytes(float64(live)) + " already in tensors"
	}
	panic(errorf(op, "%v %v needs %s, over the memory budget of %s (%s)%s; free tensors or raise the budget with forge.SetMemoryBudget (in the REPL: :set budget <size>)",
		dt, shape, numfmt.Bytes(float64(need)), numfmt.Bytes(float64(budget)), src.long, held))
}

// AvailableMemory is the memory the system can give now without swapping,
// in bytes: MemAvailable of /proc/meminfo on Linux; on macOS the physical
// memory (hw.memsize: what is free there is hard to tell, and GPU buffers
// share it); ok false elsewhere or if unreadable. FORGE_MEMORY_AVAILABLE
// (bytes) overrides it, for tests.
func AvailableMemory() (bytes int64, ok bool) {
	if v := os.Getenv("FORGE_MEMORY_AVAILABLE"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil && n > 0
	}
	if runtime.GOOS != "linux" {
		return physicalMemory() // macOS: all of it (unified memory), the bound a run cannot pass
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 2 && fields[1] == "kB" {
				if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return kb << 10, true
				}
			}
		}
	}
	return 0, false
}
