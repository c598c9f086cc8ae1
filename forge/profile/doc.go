// Package profile times Forge's kernels: it records every kernel call made
// while a recording runs, summarises them per kernel against the
// machine's measured peak (a roofline), exports Chrome traces, and
// microbenchmarks functions and single kernels, %timeit style (a training
// step: train.BenchStep). It builds on forge alone: the model and training
// packages may use it, never the reverse.
//
//	p := profile.RunN(5, func() { trainer.Step() })
//	fmt.Println(p.Report(profile.ReportOptions{Top: 12, Peak: profile.Peak()}))
//	f, _ := os.Create("step.json")
//	p.WriteTrace(f) // open in ui.perfetto.dev
//
//	r, _ := profile.BenchKernel("matmul", 1024, 1024, 1024)
//	fmt.Println(r) // matmul 1024×1024×1024 float32 on cpu (openblas): 190.1 GFLOP/s …
//
// # Recording
//
// Run, RunN and Start/Stop install an observer at forge's single
// dispatch point (forge.SetObserver), chaining any observer installed
// before, so every kernel of every backend is seen with its name, the
// code path that ran (Variant), shapes, dtype, phase (forward, backward,
// optimizer), scope, the FLOPs and bytes it declares, its start and its
// duration, and every scope as it ends. On the CPU the duration is the wall time of the call; a GPU
// backend reports device time. While recording, every kernel is timed
// (two clock reads per call); otherwise the dispatch point costs nothing.
//
// The recording's wall time minus the kernels' time is the time spent
// outside kernels: the framework's host work (graph recording, allocation,
// Go code between kernels). Reports split the wall time among the phases:
// each gap between kernels belongs to the phase of the kernel after it.
//
// # Scopes and host phases
//
// forge.Scope(name, fn) labels the kernels launched inside fn with a path
// ("blocks.3"; nested scopes join with "/"), which their records carry;
// gpt.Model marks each transformer block, so a report grouped by scope
// gives per-layer forward time. Backward kernels run later, inside
// Backward, outside any scope: they are attributed by phase only
// ("(backward)"). Like forge's phase the path is process-wide, so profile
// one goroutine's work at a time. TimeHost(phase, fn) times host work that
// launches no kernels, such as loading a batch ("data"), as a phase of its
// own.
//
// # Roofline
//
// Peak measures the device once and caches the result per machine
// (host, device, CPU model, GOMAXPROCS, matmul path and BLAS core) as JSON
// under the user's cache directory (forge/profile/, or
// $FORGE_CACHE_DIR/profile/), with the load it was measured under: a peak
// measured while other processes kept the CPUs busy is cached too and
// says that it may be low. Only Calibrate (`forge bench peak
// --recalibrate`) measures again. Its compute roof is the hardware's: on the CPU, the float32
// throughput of a loop of independent FMA chains at the widest vectors the
// CPU runs (AVX-512 ZMM, else AVX2 YMM, NEON on arm64), on every worker at
// once, the best of seven 40 ms runs. Beside it stand the best of five
// 2048³ sgemm calls and of five 64 MiB copies, through the same kernels
// profiles record; the sgemm figure is given as a share of the roof.
// Without an FMA loop for the device (a GPU), or when sgemm beats the loop,
// the roof is the sgemm figure; Roofline.Roof says which. Roofline.String
// and a report's header also print the device's Describe line: the BLAS
// library, its kernels and who chose them. A report gives each kernel its
// arithmetic intensity (FLOP/byte), whether it is compute- or
// memory-bound, and the share of the attainable rate it reached (peak
// GFLOP/s is the compute roof; "% of peak" always means of it):
//
//	attainable GFLOP/s = min(peak GFLOP/s, intensity × peak GB/s)
//	% of roofline      = max(FLOPs / peak GFLOP/s, bytes / peak GB/s) / time
//
// # Errors
//
// Recording and reporting never fail. BenchKernel returns errors for
// unknown kernels, bad sizes and kernels the backend does not implement;
// WriteTrace returns the writer's error.
package profile
