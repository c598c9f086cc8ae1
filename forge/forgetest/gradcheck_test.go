package forgetest

import "testing"

func TestGradCheck(t *testing.T) { GradCheck(t, Device(t)) }
