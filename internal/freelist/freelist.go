package freelist

// List is a bounded free list of *T. The zero List is not usable; make one
// with New.
type List[T any] struct {
	free  chan *T
	alloc func() *T
}

// New returns a list that keeps up to capacity buffers; Get makes a new one
// with alloc (new(T) when alloc is nil) when the list is empty.
func New[T any](capacity int, alloc func() *T) *List[T] {
	if alloc == nil {
		alloc = func() *T { return new(T) }
	}
	return &List[T]{free: make(chan *T, capacity), alloc: alloc}
}

// Get takes a kept buffer, or makes a new one when none is kept.
func (l *List[T]) Get() *T {
	select {
	case b := <-l.free:
		return b
	default:
		return l.alloc()
	}
}

// Put keeps b for a later Get, or drops it when the list is full.
func (l *List[T]) Put(b *T) {
	select {
	case l.free <- b:
	default:
	}
}
