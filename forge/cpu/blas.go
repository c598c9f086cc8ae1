package cpu

// initBLAS loads a BLAS library. Placeholder until the BLAS loader lands.
func initBLAS() {}
