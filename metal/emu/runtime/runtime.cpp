// runtime.cpp — the emulator's execution engine, compiled into the same
// shared library as the kernels (package metal/emu).
//
// A dispatch runs its threadgroups on a pool of worker pthreads (all async
// signals blocked, so Go's signal handlers never run on a fiber stack).
// Within a threadgroup every GPU thread is a fiber with its own 64 KB stack
// (plus a guard page); fibers run cooperatively, one at a time, in the
// order the schedule picks, each until it reaches a rendezvous point — a
// threadgroup barrier, a simd_* function or a simdgroup_load — or returns.
// When every fiber is blocked the scheduler resolves what can be resolved:
// a simdgroup whose lanes wait at the same simd call, else a barrier that
// every live thread reached. Anything else (threads waiting at different
// barriers, a simd call whose lanes can never meet) is reported as an
// error, not a hang.
#include "forge_emu_abi.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#define EXPORT extern "C" __attribute__((visibility("default")))

// ---- kernel table (generated) -------------------------------------------------
struct forge_emu_kernel {
    const char* name;
    forge_kernel_fn fn;
    int direct;  // the kernel cannot rendezvous: run its threads as plain calls
};
extern "C" const forge_emu_kernel forge_emu_kernels[];
extern "C" const int forge_emu_nkernels;
extern "C" const int forge_emu_nsites;

unsigned forge_rt_fc_bits[65536];
unsigned char forge_rt_fc_def[65536];

// Debian 12's libgcc lacks the float → bfloat conversion clang calls.
extern "C" __attribute__((weak)) __bf16 __truncsfbf2(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h = (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    } else {
        u += 0x7fffu + ((u >> 16) & 1);  // round to nearest even
        h = (uint16_t)(u >> 16);
    }
    __bf16 r;
    memcpy(&r, &h, 2);
    return r;
}

#include "fiber_switch.h"

// ---- workers, fibers ------------------------------------------------------------
enum { ST_RUN, ST_BARRIER, ST_SIMD, ST_DONE };
enum { MAX_THREADS = 1024, MAX_SIMDGROUPS = MAX_THREADS / FORGE_SIMD_WIDTH, TG_LIMIT = 32768, ARENA_SIZE = 1 << 20 };
static const size_t STACK_SIZE = 64 << 10;

struct Launch {
    int64_t kernel;
    int64_t threads;   // worker threads to use
    int64_t schedule;  // 0 forward, 1 reverse, 2 random
    uint64_t seed;
    uint32_t groups[3];
    uint32_t tg[3];
    void* const* args;
    int64_t nargs;
    const uint32_t* consts;  // (index, bits) pairs
    int64_t nconsts;
    char* err;
    int64_t errcap;
    int64_t rounds;  // out: scheduling rounds (all workers)
    int64_t switches;  // out: fiber switches (all workers)
    uint64_t fault_addr;  // out: address of a memory fault (0 if none)
    int64_t timeout_ms;   // watchdog: fail the dispatch after this long (0: never)
};

struct Worker;
struct Fiber {
    void* sp;
    int state;
    Worker* w;
    const char* file;  // where it blocks
    unsigned line;
    forge_simd_fn fn;
    char* stack_top;
    forge_thread_info info;
};

struct Worker {
    int id;
    pthread_t th;
    void* sched_sp;
    Fiber* cur;
    Fiber* fibers;
    char* stacks;
    size_t nstacks;
    forge_simd_x* sx;
    unsigned char* arena;
    size_t arena_used;
    uint64_t* site_gen;
    size_t* site_off;
    uint64_t gen;
    unsigned order[MAX_THREADS];
    uint64_t seen;
    bool failed;
    int64_t rounds, switches;
    forge_kernel_fn fn;
    const Launch* L;
    // fault handling: a synchronous signal in kernel code jumps back to
    // worker_run_job.
    sigjmp_buf jmp;
    volatile int in_kernel;
    volatile int fault_sig;
    void* volatile fault_addr;
    uint32_t group[3];
    bool direct;
    unsigned pos, nround;  // position of the running fiber in this round's order
};

#if defined(__linux__)
// initial-exec: a plain %fs-relative load, no __tls_get_addr call on every
// barrier and simd function (8 bytes of the static TLS surplus).
static __thread Worker* tls_w __attribute__((tls_model("initial-exec")));
#else
static __thread Worker* tls_w;
#endif

// ---- errors ------------------------------------------------------------------------
static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char err_msg[4096];
static std::atomic<int> err_set;

static void set_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char* fmt, ...) {
    // The watchdog's signal must not jump out while err_mu is held.
    sigset_t xcpu, old;
    sigemptyset(&xcpu);
    sigaddset(&xcpu, SIGXCPU);
    pthread_sigmask(SIG_BLOCK, &xcpu, &old);
    pthread_mutex_lock(&err_mu);
    if (!err_set.load()) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err_msg, sizeof err_msg, fmt, ap);
        va_end(ap);
        err_set.store(1);
    }
    pthread_mutex_unlock(&err_mu);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// fail ends the calling fiber's threadgroup: the scheduler sees w->failed.
static void fail_fiber(Worker* w) {
    Fiber* f = w->cur;
    w->failed = true;
    f->state = ST_DONE;
    forge_switch(&f->sp, w->sched_sp);
    abort();  // never resumed
}

// ---- the kernel-facing calls -------------------------------------------------------
// yield_next leaves fiber f (already marked waiting or done) for the next
// runnable fiber of the current round — a direct switch, without going
// through the scheduler — or, at the end of the round, the scheduler.
static inline void yield_next(Worker* w, Fiber* f) {
    w->switches++;
    for (unsigned k = w->pos + 1; k < w->nround; k++) {
        Fiber* g = &w->fibers[w->order[k]];
        if (g->state == ST_RUN) {
            w->pos = k;
            w->cur = g;
            forge_switch(&f->sp, g->sp);
            return;
        }
    }
    w->pos = w->nround;
    w->cur = nullptr;
    forge_switch(&f->sp, w->sched_sp);
}

static inline void block(Worker* w, Fiber* f) { yield_next(w, f); }

static void direct_violation(Worker* w, const char* file, unsigned line) {
    set_error("%s:%u: internal error: a rendezvous in a kernel run without fibers (set FORGE_EMU_NO_DIRECT=1 and report it)",
              file, line & 0xfffff);
    fail_fiber(w);
}

extern "C" void forge_rt_barrier(const char* file, unsigned line) {
    Worker* w = tls_w;
    if (w->direct) direct_violation(w, file, line);
    Fiber* f = w->cur;
    f->state = ST_BARRIER;
    f->file = file;
    f->line = line;
    block(w, f);
}

extern "C" const void* forge_rt_simd(const void* in, unsigned size, int arg, forge_simd_fn fn, const char* file,
                                     unsigned line) {
    Worker* w = tls_w;
    if (w->direct) direct_violation(w, file, line);
    Fiber* f = w->cur;
    forge_simd_x* x = &w->sx[f->info.sgiitg];
    unsigned lane = f->info.tiisg;
    if (size) memcpy(x->in[lane], in, size);
    x->arg[lane] = arg;
    f->state = ST_SIMD;
    f->fn = fn;
    f->file = file;
    f->line = line;
    block(w, f);
    return x->out[lane];
}

extern "C" void* forge_rt_tg_slot(unsigned site, unsigned long size, unsigned long align, const char* file,
                                  unsigned line) {
    Worker* w = tls_w;
    if (site >= (unsigned)forge_emu_nsites) {
        set_error("%s:%u: internal error: threadgroup site %u out of range", file, line, site);
        fail_fiber(w);
    }
    if (w->site_gen[site] == w->gen) return w->arena + w->site_off[site];
    if (align < 16) align = 16;
    size_t off = (w->arena_used + align - 1) & ~(size_t)(align - 1);
    if (off + size > TG_LIMIT) {
        set_error("%s:%u: threadgroup memory of the kernel exceeds %d bytes (%zu needed)", file, line, TG_LIMIT,
                  (size_t)(off + size));
        fail_fiber(w);
    }
    memset(w->arena + off, 0xFF, size);  // NaN / -1: stale data cannot hide a bug
    w->arena_used = off + size;
    w->site_gen[site] = w->gen;
    w->site_off[site] = off;
    return w->arena + off;
}

// Static threadgroup declarations of kernel bodies, registered by the
// library's initializers (one thread: dlopen).
namespace {
struct TGStatic {
    const void* fn;
    unsigned site;
    unsigned long size, align;
};
enum { TG_STATIC_MAX = 8192 };
TGStatic tg_static[TG_STATIC_MAX];
int tg_nstatic;
bool tg_static_overflow;
}  // namespace

extern "C" int forge_rt_tg_static(const void* fn, unsigned site, unsigned long size, unsigned long align) {
    for (int i = 0; i < tg_nstatic; i++)
        if (tg_static[i].fn == fn && tg_static[i].site == site) return 0;
    if (tg_nstatic == TG_STATIC_MAX) {
        tg_static_overflow = true;
        return 0;
    }
    tg_static[tg_nstatic++] = TGStatic{fn, site, size, align};
    return 0;
}

extern "C" long forge_rt_tg_static_bytes(const void* fn) {
    if (tg_static_overflow) return -1;
    // the function's declarations in site (source) order, aligned as
    // forge_rt_tg_slot lays them out
    unsigned long used = 0;
    long last = -1;
    for (;;) {
        int best = -1;
        for (int i = 0; i < tg_nstatic; i++)
            if (tg_static[i].fn == fn && (long)tg_static[i].site > last &&
                (best < 0 || tg_static[i].site < tg_static[best].site))
                best = i;
        if (best < 0) break;
        unsigned long a = tg_static[best].align < 16 ? 16 : tg_static[best].align;
        used = ((used + a - 1) & ~(a - 1)) + tg_static[best].size;
        last = tg_static[best].site;
    }
    return (long)used;
}

extern "C" unsigned forge_rt_lane(void) {
    Worker* w = tls_w;
    return w->cur ? w->cur->info.tiisg : 0;
}

extern "C" void forge_rt_fault(const char* msg, const char* file, unsigned line) {
    set_error("%s:%u: %s", file, line, msg);
    fail_fiber(tls_w);
}

// ---- scheduler ------------------------------------------------------------------------
static void fiber_main(void* arg) {
    Fiber* f = (Fiber*)arg;
    Worker* w = f->w;
    w->fn(&f->info);
    f->state = ST_DONE;
    yield_next(w, f);
    abort();  // a finished fiber is never resumed
}

static uint64_t splitmix(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// guard_size is the page size (16 KB on Apple silicon): one guard page
// below every fiber stack.
static size_t guard_size() {
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (size_t)pg : 4096;
}

static bool ensure_stacks(Worker* w, size_t n) {
    if (w->nstacks >= n) return true;
    const size_t pg = guard_size();
    size_t per = STACK_SIZE + pg;
    char* p = (char*)mmap(nullptr, per * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON
#ifdef MAP_NORESERVE
                                                                                 | MAP_NORESERVE
#endif
                          , -1, 0);
    if (p == MAP_FAILED) return false;
    for (size_t i = 0; i < MAX_THREADS; i++) mprotect(p + i * per, pg, PROT_NONE);  // guard page below each stack
    w->stacks = p;
    w->nstacks = MAX_THREADS;
    for (size_t i = 0; i < MAX_THREADS; i++) w->fibers[i].stack_top = p + (i + 1) * per;
    return true;
}

static const char* state_name(int s) {
    switch (s) {
        case ST_RUN: return "running";
        case ST_BARRIER: return "threadgroup_barrier";
        case ST_SIMD: return "simd rendezvous";
    }
    return "done";
}

// describe writes a summary of where the fibers of a stuck threadgroup wait.
static void describe(Worker* w, unsigned n, char* buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    unsigned i = 0;
    int groups = 0;
    while (i < n && groups < 6) {
        Fiber* f = &w->fibers[i];
        unsigned j = i + 1;
        while (j < n && w->fibers[j].state == f->state && w->fibers[j].line == f->line && w->fibers[j].file == f->file)
            j++;
        int k;
        if (f->state == ST_DONE)
            k = snprintf(buf + len, cap - len, "%sthreads %u-%u returned", groups ? "; " : "", i, j - 1);
        else
            k = snprintf(buf + len, cap - len, "%sthreads %u-%u wait at %s %s:%u:%u", groups ? "; " : "", i, j - 1,
                         state_name(f->state), f->file ? f->file : "?", f->line & 0xfffff, f->line >> 20);
        if (k < 0 || (size_t)k >= cap - len) break;
        len += k;
        groups++;
        i = j;
    }
    if (i < n && len + 8 < cap) snprintf(buf + len, cap - len, "; …");
}

static void shuffle(unsigned* order, unsigned n, uint64_t* rng) {
    for (unsigned i = 0; i < n; i++) order[i] = i;
    for (unsigned i = n - 1; i > 0; i--) {
        unsigned j = (unsigned)(splitmix(rng) % (i + 1));
        unsigned t = order[i]; order[i] = order[j]; order[j] = t;
    }
}

// thread_info sets the built-ins of thread i of threadgroup (gx, gy, gz).
static inline void thread_info(forge_thread_info* t, const Launch* L, unsigned i, uint32_t gx, uint32_t gy, uint32_t gz) {
    const uint32_t tx = L->tg[0], ty = L->tg[1];
    const unsigned n = tx * ty * L->tg[2];
    t->args = L->args;
    t->tptg[0] = i % tx; t->tptg[1] = (i / tx) % ty; t->tptg[2] = i / (tx * ty);
    t->tgpig[0] = gx; t->tgpig[1] = gy; t->tgpig[2] = gz;
    for (int d = 0; d < 3; d++) {
        t->ntptg[d] = L->tg[d];
        t->ntgpg[d] = L->groups[d];
        t->ntpg[d] = L->tg[d] * L->groups[d];
        t->tpig[d] = t->tgpig[d] * L->tg[d] + t->tptg[d];
    }
    t->tiitg = i;
    t->tiisg = i % FORGE_SIMD_WIDTH;
    t->sgiitg = i / FORGE_SIMD_WIDTH;
    t->tpsg = FORGE_SIMD_WIDTH;
    t->sgptg = (n + FORGE_SIMD_WIDTH - 1) / FORGE_SIMD_WIDTH;
}

// direct_main runs all threads of the worker's current group one after
// another (kernels that cannot rendezvous).
static void direct_main(void* arg) {
    Fiber* f = (Fiber*)arg;
    Worker* w = f->w;
    const Launch* L = w->L;
    const unsigned n = L->tg[0] * L->tg[1] * L->tg[2];
    for (unsigned k = 0; k < n; k++) {
        thread_info(&f->info, L, w->order[k], w->group[0], w->group[1], w->group[2]);
        w->fn(&f->info);
    }
    f->state = ST_DONE;
    forge_switch(&f->sp, w->sched_sp);
    abort();
}

// run_group runs threadgroup (gx, gy, gz) to completion; false on error.
static bool run_group(Worker* w, const Launch* L, uint32_t gx, uint32_t gy, uint32_t gz) {
    const unsigned n = L->tg[0] * L->tg[1] * L->tg[2];
    const unsigned nsg = (n + FORGE_SIMD_WIDTH - 1) / FORGE_SIMD_WIDTH;
    w->gen++;
    w->arena_used = 0;
    w->failed = false;
    uint64_t rng = L->seed * 0x9e3779b97f4a7c15ull + (((uint64_t)gz * L->groups[1] + gy) * L->groups[0] + gx) + 1;
    for (unsigned i = 0; i < n; i++) w->order[i] = L->schedule == 1 ? n - 1 - i : i;
    if (w->direct) {
        // One fiber runs every thread of the group in schedule order.
        if (L->schedule == 2) shuffle(w->order, n, &rng);
        Fiber* f = &w->fibers[0];
        f->w = w;
        f->state = ST_RUN;
        f->file = nullptr;
        f->sp = init_frame(f->stack_top, f, direct_main);
        w->cur = f;
        w->switches += 2;
        forge_switch(&w->sched_sp, f->sp);
        w->cur = nullptr;
        return !w->failed;
    }
    for (unsigned i = 0; i < n; i++) {
        Fiber* f = &w->fibers[i];
        thread_info(&f->info, L, i, gx, gy, gz);
        f->w = w;
        f->state = ST_RUN;
        f->file = nullptr;
        f->line = 0;
        f->sp = init_frame(f->stack_top, f, fiber_main);
    }
    for (;;) {
        if (L->schedule == 2) shuffle(w->order, n, &rng);
        w->rounds++;
        w->nround = n;
        for (unsigned k = 0; k < n; k++) {
            Fiber* f = &w->fibers[w->order[k]];
            if (f->state != ST_RUN) continue;
            // f runs, then hands over to the next runnable fiber directly;
            // the last one of the round switches back here.
            w->pos = k;
            w->cur = f;
            w->switches++;
            forge_switch(&w->sched_sp, f->sp);
            w->cur = nullptr;
            if (w->failed) return false;
            break;
        }
        // Every fiber now waits or is done. Resolve simd rendezvous first:
        // per simdgroup, the lanes waiting at the same call as the lowest
        // waiting lane meet (the others are on another path).
        bool progress = false;
        for (unsigned s = 0; s < nsg; s++) {
            unsigned lo = s * FORGE_SIMD_WIDTH, hi = lo + FORGE_SIMD_WIDTH;
            if (hi > n) hi = n;
            // The lanes that meet are those at the earliest call site in
            // program order (line, then column): lanes that are behind —
            // still in the other branch of an if, or in more iterations of
            // a loop — catch up before the others go on, as SIMT hardware
            // runs a divergent branch to its reconvergence point.
            Fiber* first = nullptr;
            uint64_t best = ~0ull;
            for (unsigned i = lo; i < hi; i++) {
                Fiber* f = &w->fibers[i];
                if (f->state != ST_SIMD) continue;
                uint64_t key = ((uint64_t)(f->line & 0xfffff) << 12) | (f->line >> 20);
                if (key < best) { best = key; first = f; }
            }
            unsigned mask = 0;
            for (unsigned i = lo; i < hi; i++) {
                Fiber* f = &w->fibers[i];
                if (f->state == ST_SIMD && f->fn == first->fn && f->line == first->line && f->file == first->file)
                    mask |= 1u << (i - lo);
            }
            if (!first) continue;
            forge_simd_x* x = &w->sx[s];
            x->active = mask;
            x->nlanes = hi - lo;
            first->fn(x);
            for (unsigned i = lo; i < hi; i++)
                if (mask & (1u << (i - lo))) w->fibers[i].state = ST_RUN;
            progress = true;
        }
        if (progress) continue;
        unsigned live = 0, atbar = 0;
        Fiber* b0 = nullptr;
        bool same = true;
        for (unsigned i = 0; i < n; i++) {
            Fiber* f = &w->fibers[i];
            if (f->state == ST_DONE) continue;
            live++;
            if (f->state == ST_BARRIER) {
                atbar++;
                if (!b0) b0 = f;
                else if (f->line != b0->line || f->file != b0->file) same = false;
            }
        }
        if (live == 0) return true;
        char where[1024];
        if (atbar == live && same) {
            for (unsigned i = 0; i < n; i++)
                if (w->fibers[i].state == ST_BARRIER) w->fibers[i].state = ST_RUN;
            continue;
        }
        describe(w, n, where, sizeof where);
        if (atbar == live)
            set_error("threadgroup (%u,%u,%u): divergent barriers: %s", gx, gy, gz, where);
        else
            set_error("threadgroup (%u,%u,%u): deadlock: %s", gx, gy, gz, where);
        return false;
    }
}

// ---- pool -----------------------------------------------------------------------------
static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;  // one dispatch at a time
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static Worker* workers[256];
static int nworkers;
static inline bool workers_ready(int i) { return i < nworkers && workers[i] != nullptr; }
static uint64_t job_gen;
static int job_nworkers;
static int job_running;
static const Launch* job;
static std::atomic<uint64_t> job_next;
static uint64_t job_total;

static void report_fault(Worker* w, const Launch* L);

static void worker_run_job(Worker* w, const Launch* L) {
    w->fn = forge_emu_kernels[L->kernel].fn;
    w->direct = forge_emu_kernels[L->kernel].direct != 0;
    w->L = L;
    uint64_t gxy = (uint64_t)L->groups[0] * L->groups[1];
    if (sigsetjmp(w->jmp, 1) != 0) {
        report_fault(w, L);
        return;
    }
    for (;;) {
        if (err_set.load(std::memory_order_relaxed)) return;
        uint64_t g = job_next.fetch_add(1);
        if (g >= job_total) return;
        uint32_t gz = (uint32_t)(g / gxy), gy = (uint32_t)((g % gxy) / L->groups[0]), gx = (uint32_t)(g % L->groups[0]);
        w->group[0] = gx; w->group[1] = gy; w->group[2] = gz;
        w->in_kernel = 1;
        bool ok = run_group(w, L, gx, gy, gz);
        w->in_kernel = 0;
        if (!ok) return;
    }
}

// ---- faults ---------------------------------------------------------------------------
// A kernel that faults (a bad address, integer division by zero, a trap)
// raises a synchronous signal on its worker thread. The handler, installed
// once for the process, recognises the worker and jumps back to its loop;
// on any other thread (Go's, or foreign) it hands the signal to the handler
// that was installed before (Go's), as if it had never been there.
// SIGXCPU is the watchdog's: it is sent only to a worker running a kernel
// past the dispatch's deadline.
enum { NFAULT = 5 };
static const int fault_signals[NFAULT] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGXCPU};
static struct sigaction old_actions[NFAULT];
static int fault_handlers_installed;

static void fault_handler(int sig, siginfo_t* info, void* ctx) {
    pthread_t self = pthread_self();
    Worker* w = nullptr;
    for (int i = 0; i < 256 && workers_ready(i); i++)
        if (pthread_equal(workers[i]->th, self)) { w = workers[i]; break; }
    if (w && w->in_kernel) {
        w->in_kernel = 0;
        w->fault_sig = sig;
        w->fault_addr = info ? info->si_addr : nullptr;
        siglongjmp(w->jmp, 1);
    }
    for (int i = 0; i < NFAULT; i++) {
        if (fault_signals[i] != sig) continue;
        struct sigaction* o = &old_actions[i];
        if ((o->sa_flags & SA_SIGINFO) && o->sa_sigaction) {
            o->sa_sigaction(sig, info, ctx);
            return;
        }
        if (!(o->sa_flags & SA_SIGINFO) && o->sa_handler != SIG_DFL && o->sa_handler != SIG_IGN) {
            o->sa_handler(sig);
            return;
        }
        // Default action: restore it; the faulting instruction runs again.
        sigaction(sig, o, nullptr);
        return;
    }
}

static void install_fault_handlers() {
    if (fault_handlers_installed || getenv("FORGE_EMU_NO_FAULT_HANDLER")) return;
    fault_handlers_installed = 1;
    for (int i = 0; i < NFAULT; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = fault_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(fault_signals[i], &sa, &old_actions[i]);
    }
}

static void report_fault(Worker* w, const Launch* L) {
    const char* what = "fault";
    switch (w->fault_sig) {
        case SIGSEGV: what = "invalid memory access (SIGSEGV)"; break;
        case SIGBUS: what = "bus error (SIGBUS)"; break;
        case SIGFPE: what = "arithmetic fault, e.g. integer division by zero (SIGFPE)"; break;
        case SIGILL: what = "trap (SIGILL)"; break;
    }
    if (w->fault_sig == SIGXCPU) {  // the watchdog set the error
        w->cur = nullptr;
        return;
    }
    char where[128] = "";
    Fiber* f = w->cur;
    if (f) {
        snprintf(where, sizeof where, ", thread (%u,%u,%u) of threadgroup (%u,%u,%u)", f->info.tptg[0], f->info.tptg[1],
                 f->info.tptg[2], w->group[0], w->group[1], w->group[2]);
    }
    uintptr_t a = (uintptr_t)w->fault_addr;
    bool overflow = false;
    const size_t pg = guard_size();
    if (w->stacks && a >= (uintptr_t)w->stacks && a < (uintptr_t)w->stacks + (STACK_SIZE + pg) * MAX_THREADS &&
        (a - (uintptr_t)w->stacks) % (STACK_SIZE + pg) < pg)
        overflow = true;
    if (overflow)
        set_error("stack overflow: a GPU thread used more than its %zu KB fiber stack%s", STACK_SIZE >> 10, where);
    else
        set_error("kernel %s: %s at address %p%s", forge_emu_kernels[L->kernel].name, what, w->fault_addr, where);
    if (!overflow && w->fault_sig != SIGFPE && w->fault_sig != SIGILL) ((Launch*)L)->fault_addr = (uint64_t)a;
    w->cur = nullptr;
}

static void* worker_main(void* arg) {
    Worker* w = (Worker*)arg;
    tls_w = w;
    // The fault handler must run on a stack of its own (a fiber's stack
    // may be the thing that overflowed).
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_size = 64 << 10;
    ss.ss_sp = malloc(ss.ss_size);
    if (ss.ss_sp) sigaltstack(&ss, nullptr);
    for (;;) {
        pthread_mutex_lock(&pool_mu);
        for (;;) {
            while (job_gen == w->seen) pthread_cond_wait(&pool_work, &pool_mu);
            w->seen = job_gen;
            if (w->id < job_nworkers) break;
        }
        const Launch* L = job;
        pthread_mutex_unlock(&pool_mu);
        worker_run_job(w, L);
        pthread_mutex_lock(&pool_mu);
        if (--job_running == 0) pthread_cond_signal(&pool_done);
        pthread_mutex_unlock(&pool_mu);
    }
    return nullptr;
}

static Worker* new_worker(int id) {
    Worker* w = (Worker*)calloc(1, sizeof(Worker));
    if (!w) return nullptr;
    w->id = id;
    w->fibers = (Fiber*)calloc(MAX_THREADS, sizeof(Fiber));
    if (posix_memalign((void**)&w->sx, 64, sizeof(forge_simd_x) * MAX_SIMDGROUPS) != 0) return nullptr;
    if (posix_memalign((void**)&w->arena, 256, ARENA_SIZE) != 0) return nullptr;
    size_t ns = forge_emu_nsites > 0 ? forge_emu_nsites : 1;
    w->site_gen = (uint64_t*)calloc(ns, sizeof(uint64_t));
    w->site_off = (size_t*)calloc(ns, sizeof(size_t));
    if (!w->fibers || !w->site_gen || !w->site_off || !ensure_stacks(w, MAX_THREADS)) return nullptr;
    return w;
}

// start_thread starts fn on a new pthread with every async signal blocked
// (the mask is inherited from the creating thread, set around the create).
static bool start_thread(pthread_t* th, void* (*fn)(void*), void* arg) {
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGXCPU);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    int rc = pthread_create(th, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return rc == 0;
}

static bool ensure_workers(int n) {
    install_fault_handlers();
    while (nworkers < n) {
        Worker* w = new_worker(nworkers);
        if (!w) return false;
        w->seen = job_gen;
        if (!start_thread(&w->th, worker_main, w)) return false;
        pthread_detach(w->th);
        workers[nworkers++] = w;
    }
    return true;
}

// ---- watchdog --------------------------------------------------------------------------
// While a dispatch with a timeout runs, a thread checks its deadline every
// 50 ms and, once it passed, interrupts the workers still in kernel code.
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static int64_t wd_deadline_ns;  // 0: no dispatch to watch
static int wd_started;

static int64_t now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void* watchdog_main(void*) {
    pthread_mutex_lock(&wd_mu);
    for (;;) {
        while (wd_deadline_ns == 0) pthread_cond_wait(&wd_cv, &wd_mu);
        int64_t dl = wd_deadline_ns;
        pthread_mutex_unlock(&wd_mu);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, nullptr);
        pthread_mutex_lock(&wd_mu);
        if (wd_deadline_ns == dl && now_ns() > dl) {
            const Launch* L = job;
            if (L)  // (this also stops the workers from taking more threadgroups)
                set_error("kernel %s: still running after the %.3g s watchdog timeout (an endless loop?)",
                          forge_emu_kernels[L->kernel].name, L->timeout_ms / 1000.0);
            for (int i = 0; i < nworkers; i++)
                if (workers[i]->in_kernel) pthread_kill(workers[i]->th, SIGXCPU);
            wd_deadline_ns = now_ns() + 50 * 1000000;  // again, for workers that were between groups
        }
    }
    return nullptr;
}

static void watch(int64_t timeout_ms) {
    pthread_mutex_lock(&wd_mu);
    if (timeout_ms > 0 && !wd_started) {
        pthread_t th;
        if (start_thread(&th, watchdog_main, nullptr)) {
            pthread_detach(th);
            wd_started = 1;
        }
    }
    wd_deadline_ns = timeout_ms > 0 ? now_ns() + timeout_ms * 1000000 : 0;
    pthread_cond_signal(&wd_cv);
    pthread_mutex_unlock(&wd_mu);
}

static uint32_t fc_set[65536];
static int fc_nset;

// forge_emu_launch runs one dispatch to completion and returns 0, or -1
// with a message in L->err.
EXPORT int forge_emu_launch(Launch* L) {
    pthread_mutex_lock(&launch_mu);
    err_set.store(0);
    err_msg[0] = 0;
    int rc = 0;
    uint64_t total = (uint64_t)L->groups[0] * L->groups[1] * L->groups[2];
    uint64_t nthr = (uint64_t)L->tg[0] * L->tg[1] * L->tg[2];
    int threads = (int)L->threads;
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    if ((uint64_t)threads > total) threads = (int)total;
    if (L->kernel < 0 || L->kernel >= forge_emu_nkernels) {
        set_error("no kernel %lld", (long long)L->kernel);
    } else if (nthr == 0 || nthr > MAX_THREADS) {
        set_error("threadgroup of %llu threads (1…%d)", (unsigned long long)nthr, MAX_THREADS);
    } else if (total > 0 && !ensure_workers(threads)) {
        set_error("cannot start worker threads");
    } else if (total > 0) {
        for (int i = 0; i < fc_nset; i++) { forge_rt_fc_def[fc_set[i]] = 0; forge_rt_fc_bits[fc_set[i]] = 0; }
        fc_nset = 0;
        for (int64_t i = 0; i < L->nconsts; i++) {
            uint32_t idx = L->consts[2 * i] & 0xffff;
            forge_rt_fc_bits[idx] = L->consts[2 * i + 1];
            forge_rt_fc_def[idx] = 1;
            fc_set[fc_nset++] = idx;
        }
        int64_t r0 = 0, s0 = 0;
        for (int i = 0; i < threads; i++) { r0 += workers[i]->rounds; s0 += workers[i]->switches; }
        watch(L->timeout_ms);
        pthread_mutex_lock(&pool_mu);
        job = L;
        job_next.store(0);
        job_total = total;
        job_nworkers = threads;
        job_running = threads;
        job_gen++;
        pthread_cond_broadcast(&pool_work);
        while (job_running > 0) pthread_cond_wait(&pool_done, &pool_mu);
        job = nullptr;
        pthread_mutex_unlock(&pool_mu);
        watch(0);
        int64_t r1 = 0, s1 = 0;
        for (int i = 0; i < threads; i++) { r1 += workers[i]->rounds; s1 += workers[i]->switches; }
        L->rounds = r1 - r0;
        L->switches = s1 - s0;
    }
    if (err_set.load()) {
        rc = -1;
        if (L->err && L->errcap > 0) snprintf(L->err, (size_t)L->errcap, "%s", err_msg);
    }
    pthread_mutex_unlock(&launch_mu);
    return rc;
}

// forge_emu_abi_check returns sizeof(Launch) (the Go side checks its
// mirror of the struct against it).
EXPORT int64_t forge_emu_abi_check() { return (int64_t)sizeof(Launch); }

// forge_emu_reflect returns the kernel names, one per line, in table order.
EXPORT int forge_emu_reflect(char* buf, int64_t cap) {
    size_t len = 0;
    for (int i = 0; i < forge_emu_nkernels; i++) {
        int k = snprintf(buf + len, cap - len, "%s\n", forge_emu_kernels[i].name);
        if (k < 0 || (size_t)k >= cap - len) return -1;
        len += k;
    }
    return (int)len;
}

// ---- fiber switch benchmark ----------------------------------------------------------
struct Bench {
    void* main_sp;
    void* fib_sp;
    int64_t n;
    double ns;
};
static void bench_fiber(void* arg) {
    Bench* b = (Bench*)arg;
    for (;;) forge_switch(&b->fib_sp, b->main_sp);
}
static void* bench_thread(void* arg) {
    Bench* b = (Bench*)arg;
    char* stack = (char*)malloc(STACK_SIZE);
    b->fib_sp = init_frame(stack + STACK_SIZE, b, bench_fiber);
    forge_switch(&b->main_sp, b->fib_sp);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t i = 0; i < b->n; i++) forge_switch(&b->main_sp, b->fib_sp);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    b->ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (2.0 * b->n);
    free(stack);
    return nullptr;
}
// forge_emu_bench_switch returns the cost of one fiber switch in
// picoseconds, measured with n round trips on a fresh thread.
EXPORT int64_t forge_emu_bench_switch(int64_t n) {
    Bench b = {nullptr, nullptr, n, 0};
    pthread_t th;
    if (!start_thread(&th, bench_thread, &b)) return -1;
    pthread_join(th, nullptr);
    return (int64_t)(b.ns * 1000);
}
