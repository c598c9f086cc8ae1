package train

import (
	"fmt"
	"strings"
	"time"

	"github.com/forgeml/forge/internal/termplot"
)

// Summary is what one call of Session.Train did, for a front end to print
// when it returns (String) or to show its own way.
type Summary struct {
	Config      string        // the config's name
	From, To    int           // the step count before and after
	Elapsed     time.Duration // wall time of the call
	Tokens      int64         // tokens trained on
	FirstLoss   float64       // the first step's training loss
	LastLoss    float64       // the mean training loss of the last ≤ 10 steps (less noisy than the last)
	LR          float64       // the last step's learning rate
	ValLoss     *float64      // the latest validation loss of the run, if it has one
	Losses      []float64     // the training loss of each step of the call
	Interrupted bool          // the context ended the call early
}

// Steps is the number of steps the call trained.
func (s Summary) Steps() int { return s.To - s.From }

// TokensPerSec is the call's throughput.
func (s Summary) TokensPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Tokens) / s.Elapsed.Seconds()
}

// String is the summary in one line: "steps 0→300 in 38.4s (16.0k tok/s):
// loss 6.18 → 3.06, lr 9.63e-04, val 3.1068". A call that trained no step
// says so.
func (s Summary) String() string {
	if s.Steps() <= 0 {
		return fmt.Sprintf("no step trained (at step %d)", s.To)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "steps %d→%d in %s (%s tok/s): loss %.4f → %.4f, lr %.2e", s.From, s.To,
		s.Elapsed.Round(10*time.Millisecond), termplot.Kilo(s.TokensPerSec()), s.FirstLoss, s.LastLoss, s.LR)
	if s.ValLoss != nil {
		fmt.Fprintf(&b, ", val %.4f", *s.ValLoss)
	}
	return b.String()
}

// LastRun is the Summary of the latest call of Train or TrainWith on s
// (zero before the first).
func (s *Session) LastRun() Summary { return s.lastRun }

// summarize records the Summary of a call that started at step from, at
// start, and trained done steps.
func (s *Session) summarize(from, done int, start time.Time, interrupted bool) {
	sum := Summary{Config: s.config.Name, From: from, To: s.trainer.StepCount(), Elapsed: time.Since(start), Interrupted: interrupted}
	h := s.trainer.History.Steps
	done = min(done, len(h))
	if done > 0 {
		recent := h[len(h)-done:]
		sum.Tokens = int64(done) * int64(s.config.TokensPerStep())
		sum.FirstLoss, sum.LR = recent[0].Loss, recent[len(recent)-1].LR
		sum.Losses = make([]float64, len(recent))
		for i, m := range recent {
			sum.Losses[i] = m.Loss
		}
		tail := sum.Losses[max(0, len(sum.Losses)-10):]
		for _, l := range tail {
			sum.LastLoss += l
		}
		sum.LastLoss /= float64(len(tail))
	}
	if v := s.trainer.History.LastVal(); v != nil {
		sum.ValLoss = v.ValLoss
	}
	s.lastRun = sum
}
