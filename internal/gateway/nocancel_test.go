package gateway

import (
	"context"
	"errors"
	"testing"
)

// record's detached context answers as context.WithoutCancel of the
// call's would: the call's values, never done, no cause, and what is made
// from it lives on when the call's context ends.
func TestDetachedContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	var c call
	d := c.detached(parent)
	cancel(errors.New("gone"))
	if d.Value(key{}) != "v" || d.Err() != nil || d.Done() != nil || context.Cause(d) != nil {
		t.Errorf("value %v, err %v, done %v, cause %v", d.Value(key{}), d.Err(), d.Done(), context.Cause(d))
	}
	if _, ok := d.Deadline(); ok {
		t.Error("a deadline")
	}
	child, stop := context.WithCancel(d)
	defer stop()
	if child.Err() != nil || context.Cause(child) != nil {
		t.Errorf("child: err %v, cause %v", child.Err(), context.Cause(child))
	}
	stop()
	if !errors.Is(child.Err(), context.Canceled) {
		t.Errorf("child after its own cancel: %v", child.Err())
	}
}
