package grammar

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// Compiler compiles the constraints of one model's requests: it builds
// the vocabulary on first use (a server that never sees a constraint
// never pays for it) and keeps the most recently used grammars whose
// masks fit in a byte budget, so a schema that comes back is not compiled
// again and the grammars kept cost a bounded memory. It is safe for
// concurrent use; two requests compiling the same new constraint at once
// may both compile it.
type Compiler struct {
	vocab     func() (*Vocab, error)
	lim       Limits
	keepBytes int64
	kept      int64 // the mask bytes of the grammars kept

	mu    sync.Mutex
	byKey map[[32]byte]*list.Element
	order *list.List // front: most recently used
}

type compiled struct {
	key [32]byte
	g   *Grammar
}

// NewCompiler returns a compiler for the vocabulary vocab returns (called
// once, on the first compilation), compiling with lim and keeping the most
// recent grammars whose masks (Stats.MaskBytes) add up to at most
// keepBytes (the last one compiled is kept whatever its size).
func NewCompiler(vocab func() (*Vocab, error), lim Limits, keepBytes int64) *Compiler {
	return &Compiler{vocab: sync.OnceValues(vocab), lim: lim, keepBytes: keepBytes,
		byKey: map[[32]byte]*list.Element{}, order: list.New()}
}

// Limits are the limits the compiler compiles with.
func (c *Compiler) Limits() Limits { return c.lim }

// Compile returns the grammar of spec, compiled now or earlier.
func (c *Compiler) Compile(spec Spec) (*Grammar, error) {
	v, err := c.vocab()
	if err != nil {
		return nil, err
	}
	key := keyOf(spec)
	c.mu.Lock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		g := e.Value.(*compiled).g
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	g, err := Compile(spec, v, c.lim)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; !ok {
		c.byKey[key] = c.order.PushFront(&compiled{key: key, g: g})
		c.kept += g.stats.MaskBytes
		for c.order.Len() > 1 && c.kept > c.keepBytes {
			old := c.order.Remove(c.order.Back()).(*compiled)
			delete(c.byKey, old.key)
			c.kept -= old.g.stats.MaskBytes
		}
	}
	return g, nil
}

func keyOf(spec Spec) [32]byte { return sha256.Sum256([]byte(spec.key())) }
