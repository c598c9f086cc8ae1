package notebook

import (
	"html"

	"github.com/forgeml/forge/forge/doctor"
)

// Doctor runs forge doctor on the default device (package forge/doctor):
// progress lines while it works, then the report — a preformatted block
// in a notebook, text outside — and returns it. opts, if given, are
// doctor's (its Dir defaults to the current directory, Progress to the
// cell's output).
func Doctor(opts ...doctor.Options) (*doctor.Report, error) {
	var o doctor.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Progress == nil {
		o.Progress = out
	}
	rep, err := doctor.Run(o)
	if err != nil {
		return nil, err
	}
	text := rep.Text + "\n" + rep.Summary()
	emit("<pre>"+html.EscapeString(text)+"</pre>", text)
	return rep, nil
}
