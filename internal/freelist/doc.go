// Package freelist keeps the scratch buffers of finished calls for the next
// ones, so that a steady state of calls allocates nothing, whatever the
// garbage collector or the race detector do (a sync.Pool is emptied by every
// collection). It must never block or grow without bound: Get on an empty
// list makes a new buffer, Put on a full list drops the buffer.
package freelist
