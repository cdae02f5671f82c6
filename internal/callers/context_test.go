package callers

import (
	"context"
	"testing"
)

// NewContextWith answers as NewContext over context.WithValue: the caller,
// the value under its key, the parent's values, cancellation and
// deadline; the innermost of two callers wins.
func TestNewContextWith(t *testing.T) {
	type k1 struct{}
	type k2 struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), k2{}, "parent"))
	outer := &Caller{Alias: "outer"}
	c := &Caller{Alias: "a"}
	ctx := NewContextWith(NewContext(parent, outer), c, k1{}, "v")
	if got := FromContext(ctx); got != c {
		t.Errorf("FromContext: %v, want %v", got, c)
	}
	if got := ctx.Value(k1{}); got != "v" {
		t.Errorf("Value(k1): %v", got)
	}
	if got := ctx.Value(k2{}); got != "parent" {
		t.Errorf("Value(k2): %v", got)
	}
	if got := FromContext(NewContextWith(parent, c, k1{}, "v")); got != c {
		t.Errorf("FromContext without an outer caller: %v", got)
	}
	if _, ok := ctx.Deadline(); ok {
		t.Error("a deadline the parent has not")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done()
	if ctx.Err() != context.Canceled || child.Err() != context.Canceled {
		t.Errorf("after the parent's cancel: %v, child %v", ctx.Err(), child.Err())
	}
}
