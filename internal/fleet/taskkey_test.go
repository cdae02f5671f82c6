package fleet

import (
	"bytes"
	"testing"
)

// Every replica derives the same task-id keys from the same session keys,
// one per session key in order, none equal to its root.
func TestTaskIDKeys(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, KeyLen), bytes.Repeat([]byte{2}, KeyLen)
	a, err := TaskIDKeys([][]byte{k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := TaskIDKeys([][]byte{k1, k2})
	if len(a) != 2 || !bytes.Equal(a[0], b[0]) || !bytes.Equal(a[1], b[1]) {
		t.Fatalf("not deterministic: %x %x", a, b)
	}
	if bytes.Equal(a[0], a[1]) || bytes.Equal(a[0], k1) || len(a[0]) != 32 {
		t.Fatalf("derived keys %x", a)
	}
	pk, _ := derivePeerKey(k1)
	if bytes.Equal(pk.key, a[0]) {
		t.Fatal("the task-id key is the peer key")
	}
}

// The result-sealing keys are the same on every replica, one per session
// key, and none is a key of another purpose.
func TestTaskResultKeys(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, KeyLen), bytes.Repeat([]byte{2}, KeyLen)
	a, err := TaskResultKeys([][]byte{k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := TaskResultKeys([][]byte{k1, k2})
	if len(a) != 2 || !bytes.Equal(a[0], b[0]) || !bytes.Equal(a[1], b[1]) {
		t.Fatalf("not deterministic: %x %x", a, b)
	}
	ids, _ := TaskIDKeys([][]byte{k1, k2})
	pk, _ := derivePeerKey(k1)
	if bytes.Equal(a[0], a[1]) || bytes.Equal(a[0], k1) || len(a[0]) != 32 || bytes.Equal(a[0], ids[0]) || bytes.Equal(a[0], pk.key) {
		t.Fatalf("the task-result key %x is not a key of its own", a[0])
	}
}
