package kernels

// bufPool keeps the scratch buffers of finished calls for the next ones, up
// to its capacity, so that steady-state calls allocate nothing: get takes
// one (a new one when the pool is empty), put gives one back (dropped when
// the pool is full).
type bufPool[T any] chan *T

func (p bufPool[T]) get() *T {
	select {
	case b := <-p:
		return b
	default:
		return new(T)
	}
}

func (p bufPool[T]) put(b *T) {
	select {
	case p <- b:
	default:
	}
}
