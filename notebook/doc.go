// Package notebook shows the library's objects in Jupyter notebooks run
// by the GoNB kernel, and trains runs in cells with a live dashboard.
//
// Show renders a value as HTML through gonbui: a tensor (header, a
// summarised values table and its stats; ShowHeatmap and ShowHistogram
// draw charts), a module or *gpt.Model (parameter table with counts and
// shares), a *train.Session, *train.Trainer or train.History (loss and
// val_loss, lr, grad norm and tokens/s curves), a profile.Report (a
// sortable table, a bar chart of kernel time and, with a Peak, a log-log
// roofline chart), generated Text, and
// ShowTokens(tok, text) colours a text's tokens. Outside GoNB each prints
// its text form to stdout, so the same code runs in a terminal or a test.
//
// Charts are echarts 5.6.0 (embedded from assets/, see PROVENANCE.md).
// Every chart fragment draws by itself, however it is displayed (Show, or
// gonbui.DisplayHTML(ChartHTML(…))): the first chart of a kernel session
// carries the library, gzip-compressed (0.45 MB of page text for 1.03 MB
// of JavaScript), and every chart a small loader that finds it anywhere on
// the page, decompresses it and registers it as window.echarts even under
// require.js. Later cells (new processes) do not send it again, so a saved
// notebook holds it once and works offline, in classic Notebook and
// JupyterLab. If the output that carried it is cleared or its cell run
// again, ResendLibrary makes the next chart carry it. go-echarts builds
// each option; our wrapper draws it, maps NaN/Inf to gaps, downsamples
// series to MaxPoints, and keeps a text placeholder for untrusted
// notebooks.
//
// # Errors
//
// Show and the other helpers never end a cell: a panic while they render
// (a forge error, a bad argument) is shown as one error output. Deferred
// at the top of a cell, Recover does the same for the cell's own code,
// where GoNB would otherwise report only "exit status 2".
//
// # One run across cells
//
// GoNB runs every cell as a new process: declarations are kept and
// re-run, values are not, so a model built in one cell is gone in the
// next. Keep the run in a directory instead and reopen it at the top of
// each cell; Open resumes the model, optimizer, data position and history
// from the latest checkpoint in well under a second for the small config,
// and Train saves when it stops:
//
//	// cell 1: create the run (or resume it when it exists)
//	cfg, _ := train.LoadConfig("tiny")
//	s, err := notebook.Open("runs/tiny", cfg)
//	if err != nil { panic(err) }
//	defer s.Close()
//	notebook.Train(s, 200) // live dashboard; interrupt stops and saves
//
//	// cell 2: continue exactly where cell 1 stopped
//	s, err := notebook.Open("runs/tiny")
//	if err != nil { panic(err) }
//	defer s.Close()
//	notebook.Show(s.Model())
//	s.Trainer().SetLR(3e-4)
//	notebook.Train(s, 200)
//
// Interrupting a cell (GoNB sends SIGINT, then kills the process 5 s
// later) stops Train at the next step boundary, saves the checkpoint and
// draws the final dashboard.
package notebook
