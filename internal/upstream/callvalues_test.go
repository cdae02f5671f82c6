package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// The per-field setters keep what an outer one set, the innermost value
// wins, and WithCallValues sets all three with one context value.
func TestCallValuesLayer(t *testing.T) {
	ctx := WithOrigin(context.Background(), "a")
	ctx = WithClientCapabilities(ctx, json.RawMessage(`{"roots":{}}`))
	ctx = WithLogLevel(ctx, "debug")
	ctx = WithLogLevel(ctx, "") // no level: the outer one stands
	v := CallValuesFrom(ctx)
	if v.Origin != "a" || string(v.ClientCapabilities) != `{"roots":{}}` || v.LogLevel != "debug" || OriginFrom(ctx) != "a" {
		t.Errorf("values = %+v", v)
	}
	inner := WithOrigin(ctx, "b")
	if OriginFrom(inner) != "b" || OriginFrom(ctx) != "a" || CallValuesFrom(inner).LogLevel != "debug" {
		t.Errorf("inner origin = %v, outer %v", OriginFrom(inner), OriginFrom(ctx))
	}
	all := WithCallValues(ctx, &CallValues{Origin: "c"})
	if v := CallValuesFrom(all); v.Origin != "c" || v.ClientCapabilities != nil || v.LogLevel != "" {
		t.Errorf("WithCallValues = %+v, want only the origin", v)
	}
	if OriginFrom(context.Background()) != nil {
		t.Error("an origin without one set")
	}
	// A stateless request carries them in its _meta.
	params := (&statelessMeta{clientInfo: json.RawMessage(`{"name":"g"}`)}).apply(ctx, nil)
	want := `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"g"},"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/logLevel":"debug"}}`
	if string(params) != want {
		t.Errorf("params = %s\nwant     %s", params, want)
	}
}

// A CallContext answers as WithCallValues over its parent would: its
// values, the parent's others, and the parent's cancellation, cause and
// all, for it and for what is made from it.
func TestCallContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(WithLogLevel(context.Background(), "info"), key{}, "v"))
	cc := &CallContext{Context: parent, Values: CallValues{Origin: "o"}}
	if v := CallValuesFrom(cc); v.Origin != "o" || v.LogLevel != "" || OriginFrom(cc) != "o" {
		t.Errorf("values = %+v, want only the origin", v)
	}
	if cc.Value(key{}) != "v" {
		t.Errorf("the parent's value = %v", cc.Value(key{}))
	}
	child, stop := context.WithCancel(cc)
	defer stop()
	ran := make(chan struct{})
	context.AfterFunc(cc, func() { close(ran) })
	why := errors.New("why")
	cancel(why)
	<-child.Done()
	<-ran
	if !errors.Is(cc.Err(), context.Canceled) || context.Cause(cc) != why || context.Cause(child) != why {
		t.Errorf("err %v, cause %v, child's cause %v", cc.Err(), context.Cause(cc), context.Cause(child))
	}
}
