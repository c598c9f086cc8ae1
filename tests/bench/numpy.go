package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

//go:embed numpy_matmul.py
var numpyScript string

// numpyProc is the long-lived python process timing numpy.
type numpyProc struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	version string
	blas    string
	core    string // the OpenBLAS core the process runs ("" if not OpenBLAS)
	threads int    // OpenBLAS's threads
	err     string // why numpy is unavailable ("" if it runs)
}

// startNumpy starts numpy_matmul.py under python with the environment env.
// Failure is recorded in err, never fatal.
func startNumpy(python string, env []string) *numpyProc {
	p := &numpyProc{}
	if python == "" {
		p.err = "skipped (-python \"\")"
		return p
	}
	path, err := exec.LookPath(python)
	if err != nil {
		p.err = fmt.Sprintf("%s not found", python)
		return p
	}
	p.cmd = exec.Command(path, "-c", numpyScript)
	p.cmd.Env = env
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		p.err = err.Error()
		return p
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		p.err = err.Error()
		return p
	}
	var stderr strings.Builder
	p.cmd.Stderr = &stderr
	if err := p.cmd.Start(); err != nil {
		p.err = fmt.Sprintf("%s: %v", python, err)
		return p
	}
	p.out = bufio.NewScanner(stdout)
	var hello struct {
		Numpy, Blas, Core, Error string
		Threads                  int
	}
	if !p.out.Scan() || json.Unmarshal(p.out.Bytes(), &hello) != nil {
		p.close()
		p.err = fmt.Sprintf("%s did not start the numpy script: %s", python, strings.TrimSpace(stderr.String()))
		return p
	}
	if hello.Error != "" {
		p.close()
		p.err = fmt.Sprintf("%s: %s", python, hello.Error)
		return p
	}
	p.version, p.blas, p.core, p.threads = hello.Numpy, hello.Blas, hello.Core, hello.Threads
	return p
}

// run sends one request and returns its figure, or an error message.
func (p *numpyProc) run(req string) (float64, string) {
	if _, err := fmt.Fprintln(p.in, req); err != nil {
		p.err = "numpy process died: " + err.Error()
		return 0, p.err
	}
	if !p.out.Scan() {
		p.err = "numpy process died"
		return 0, p.err
	}
	var r struct {
		Gflops, Gbps float64
		Error        string
	}
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return 0, err.Error()
	}
	if r.Error != "" {
		return 0, r.Error
	}
	return r.Gflops + r.Gbps, ""
}

// pid is the python process id (0 if none).
func (p *numpyProc) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *numpyProc) close() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.in.Close()
	p.cmd.Wait()
	p.cmd = nil
}
