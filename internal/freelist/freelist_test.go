package freelist

import (
	"runtime"
	"testing"
)

func TestList(t *testing.T) {
	made := 0
	l := New(2, func() *[4]int { made++; return new([4]int) })
	a, b, c := l.Get(), l.Get(), l.Get()
	if made != 3 {
		t.Fatalf("three Gets on an empty list made %d buffers, want 3", made)
	}
	l.Put(a)
	l.Put(b)
	l.Put(c) // the list holds two: c is dropped
	for range 2 {
		if got := l.Get(); got != a && got != b {
			t.Errorf("Get returned a buffer the list did not keep")
		}
	}
	if made != 3 {
		t.Errorf("Gets of kept buffers made new ones: %d made, want 3", made)
	}
	l.Get()
	if made != 4 {
		t.Errorf("Get on an emptied list made %d buffers in all, want 4", made)
	}
}

// A steady state of Get and Put allocates nothing, across collections too.
func TestSteadyStateDoesNotAllocate(t *testing.T) {
	l := New[[64]float32](4, nil)
	l.Put(l.Get())
	if a := testing.AllocsPerRun(50, func() { runtime.GC(); l.Put(l.Get()) }); a != 0 {
		t.Errorf("Get and Put allocate %v times per pair", a)
	}
}
