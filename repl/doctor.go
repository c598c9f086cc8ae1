package repl

import (
	"context"
	"fmt"

	"github.com/forgeml/forge/forge/doctor"
)

// cmdDoctor is :doctor — forge doctor on the session's default device:
// progress lines, then the verdict and the report's path.
func cmdDoctor(s *Session, _ context.Context, args []string) error {
	opts, pos, err := flagArgs(args, []string{"out"}, []string{"short", "no-timings"})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("doctor takes no arguments, got %q", pos[0])
	}
	o := doctor.Options{Dir: opts["out"], Progress: s.stdout}
	_, o.Short = opts["short"]
	_, o.SkipTimings = opts["no-timings"]
	rep, err := doctor.Run(o)
	if err != nil {
		return err
	}
	fmt.Fprintln(s.stdout, rep.Summary())
	return nil
}
