package mpi_test

import (
	"os"
	"testing"

	"github.com/cpmla/cpmla/comm/mpi"
)

// unset removes an environment variable for the rest of the test (t.Setenv
// has recorded its old value, and restores it at cleanup).
func unset(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}

// TestLaunched pins the launcher detection on the variables OpenMPI and
// PMIx launchers set.
func TestLaunched(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4"}, true},
		{map[string]string{"PMIX_RANK": "0"}, true},
	} {
		t.Setenv("OMPI_COMM_WORLD_SIZE", "")
		t.Setenv("PMIX_RANK", "")
		for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMIX_RANK"} {
			if _, ok := tc.env[k]; !ok {
				unset(t, k)
			}
		}
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		if got := mpi.Launched(); got != tc.want {
			t.Errorf("env %v: Launched() = %v, want %v", tc.env, got, tc.want)
		}
	}
}
