package cli

import (
	"fmt"

	"github.com/forgeml/forge/forge/doctor"
)

const doctorArgs = "[--device d] [--out dir] [--short] [--no-timings]"

// cmdDoctor checks the device (--device, else the default) and writes the report
// (forge/doctor): progress on stderr, the report and its path on stdout;
// exit status 1 if a check failed.
func cmdDoctor(e *env, args []string) error {
	fs := flags(e, "doctor")
	out := fs.String("out", ".", "directory of the report file")
	short := fs.Bool("short", false, "time each benchmark for a fraction of a second, at the smallest sizes")
	noTimings := fs.Bool("no-timings", false, "leave the timings out")
	device := deviceFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("doctor takes no arguments, got %q (choose the device with --device)", pos[0])
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	rep, err := doctor.Run(doctor.Options{Dir: *out, Progress: e.stderr, Short: *short, SkipTimings: *noTimings})
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rep.Text)
	fmt.Fprintln(e.stdout)
	fmt.Fprintln(e.stdout, rep.Summary())
	if !rep.OK() {
		return fmt.Errorf("%d check(s) failed; the report is %s", len(rep.Failures), rep.Path)
	}
	return nil
}
