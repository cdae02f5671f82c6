package tasks

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

const secretResult = `{"content":[{"type":"text","text":"the launch code is 0000"}]}`

// sealedTable is a table over st, as a replica of that id whose results
// are sealed under sealKeys (the first seals, every one opens).
func sealedTable(t *testing.T, st store.Tasks, replica string, sealKeys ...[]byte) *Table {
	key := []byte("0123456789abcdef0123456789abcdef")
	tb := NewTable(Options{Keys: [][]byte{key}, Shared: &Shared{Store: st, Replica: replica, SealKeys: sealKeys,
		Alive: func(context.Context, string) bool { return true }, Watch: 10 * time.Millisecond}})
	t.Cleanup(tb.Close)
	return tb
}

func rootKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func done(res string) Run {
	return func(context.Context) Outcome { return Outcome{Result: json.RawMessage(res)} }
}

// finished starts a task on tb that returns out, and waits for it.
func finished(t *testing.T, tb *Table, o Owner, run Run) Task {
	t.Helper()
	task, err := tb.Start(t.Context(), o, "s", cfgShort, 0, run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.Result(t.Context(), o, task.ID); err != nil {
		t.Fatal(err)
	}
	return task
}

// A finished task's result and error are sealed in the store: the row
// holds neither in clear, and another replica of the same keys opens them.
func TestSealedAtRest(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			sa, sb := be.open(t)
			a, b := sealedTable(t, sa, "A", rootKey(1)), sealedTable(t, sb, "B", rootKey(1))
			ok := finished(t, a, alice, done(secretResult))
			failed := finished(t, a, alice, func(context.Context) Outcome {
				return Outcome{Err: jsonrpc.NewError(jsonrpc.CodeInternalError, "secret error detail")}
			})
			for _, task := range []Task{ok, failed} {
				rec, err := sa.GetTask(t.Context(), rowID(task.ID))
				if err != nil {
					t.Fatal(err)
				}
				for _, raw := range [][]byte{rec.Result, rec.Error} {
					if bytes.Contains(raw, []byte("launch code")) || bytes.Contains(raw, []byte("secret error")) {
						t.Fatalf("the store holds an outcome in clear: %s", raw)
					}
				}
				if sealed := append(rec.Result, rec.Error...); !bytes.HasPrefix(sealed, []byte(`"`+sealPrefix)) {
					t.Fatalf("stored outcome %q is not sealed", sealed)
				}
			}
			if got, out, err := b.Peek(alice, ok.ID); err != nil || got.Status != Completed || string(out.Result) != secretResult {
				t.Fatalf("B peek = %+v %s %v", got, out.Result, err)
			}
			if got, out, err := b.Peek(alice, failed.ID); err != nil || got.Status != Failed || out.Err == nil || out.Err.Message != "secret error detail" {
				t.Fatalf("B peek of the failed task = %+v %+v %v", got, out.Err, err)
			}
		})
	}
}

// A sealed outcome copied to another task's row, or from the error column
// to the result column, does not open there: the reader is told the store
// is unavailable, never shown the other task's result.
func TestSealedRowMoved(t *testing.T) {
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := sealedTable(t, st, "A", rootKey(1))
	bobs := finished(t, a, bob, done(secretResult))
	bobsRow, err := st.GetTask(t.Context(), rowID(bobs.ID))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	for name, forge := range map[string]func(r *store.TaskRecord){
		"another row's result": func(r *store.TaskRecord) { r.Result = bobsRow.Result },
		"result as error":      func(r *store.TaskRecord) { r.Status, r.Error = store.TaskFailed, bobsRow.Result },
		"flipped bit": func(r *store.TaskRecord) {
			r.Result = bytes.Clone(bobsRow.Result)
			r.Result[len(r.Result)-3] ^= 1
		},
		"unknown key": func(r *store.TaskRecord) {
			other := sealedTable(t, st, "C", rootKey(9)).shared.sealer
			r.Result = other.seal(r.ID, fieldResult, []byte(secretResult))
		},
		"not a seal": func(r *store.TaskRecord) { r.Result = []byte(`"hello"`) },
	} {
		t.Run(name, func(t *testing.T) {
			task, err := a.Start(t.Context(), alice, "s", Config{TTL: time.Minute}, 0, block(release, `{}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			row, err := st.GetTask(t.Context(), rowID(task.ID))
			if err != nil {
				t.Fatal(err)
			}
			row.Status, row.UpdatedAt = store.TaskCompleted, time.Now()
			forge(&row)
			if ok, err := st.UpdateTask(t.Context(), row); !ok || err != nil {
				t.Fatalf("forging the row: %v %v", ok, err)
			}
			// Another replica (this one runs the call, and shows its own).
			b := sealedTable(t, st, "B", rootKey(1))
			got, out, err := b.Peek(alice, task.ID)
			if !errors.Is(err, ErrStore) || out.Result != nil || got.Status != "" {
				t.Fatalf("peek of a forged row = %+v %s %v; want ErrStore and nothing else", got, out.Result, err)
			}
			if _, _, err := b.Result(t.Context(), alice, task.ID); !errors.Is(err, ErrStore) {
				t.Fatalf("result of a forged row: %v, want ErrStore", err)
			}
			if _, err := b.Get(alice, task.ID); !errors.Is(err, ErrStore) {
				t.Fatalf("get of a forged row: %v, want ErrStore", err)
			}
		})
	}
}

// Rotation: a replica whose keys are [new, old] opens what old sealed and
// seals under new; one that dropped old is told the store is unavailable.
func TestSealedKeyRotation(t *testing.T) {
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	before := finished(t, sealedTable(t, st, "A", rootKey(1)), alice, done(secretResult))
	rotated := sealedTable(t, st, "B", rootKey(2), rootKey(1))
	if _, out, err := rotated.Peek(alice, before.ID); err != nil || string(out.Result) != secretResult {
		t.Fatalf("rotated replica peek = %s %v", out.Result, err)
	}
	after := finished(t, rotated, alice, done(secretResult))
	dropped := sealedTable(t, st, "C", rootKey(2))
	if _, out, err := dropped.Peek(alice, after.ID); err != nil || string(out.Result) != secretResult {
		t.Fatalf("a result sealed under the new key = %s %v", out.Result, err)
	}
	if _, _, err := dropped.Peek(alice, before.ID); !errors.Is(err, ErrStore) {
		t.Fatalf("a result sealed under a dropped key: %v, want ErrStore", err)
	}
}

// Rows written before results were sealed (clear JSON) still read.
func TestSealedUpgradeFromClear(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			st, _ := be.open(t)
			a := sealedTable(t, st, "A", rootKey(1))
			ctx := t.Context()
			// Rows as the previous version wrote them: a result and an
			// error object in clear.
			now := time.Now().UTC().Truncate(time.Millisecond)
			var nonces [2][nonceLen]byte
			for i, outcome := range []func(*store.TaskRecord){
				func(r *store.TaskRecord) { r.Status, r.Result = store.TaskCompleted, json.RawMessage(secretResult) },
				func(r *store.TaskRecord) {
					r.Status, r.StatusMessage, r.Error = store.TaskFailed, "boom", json.RawMessage(`{"code":-32603,"message":"boom"}`)
				},
			} {
				nonces[i][0] = byte(i + 1)
				r := store.TaskRecord{ID: hex.EncodeToString(nonces[i][:]), Owner: ownerPrint(alice), Route: alice.Route, Server: "s",
					Status: store.TaskWorking, CreatedAt: now, UpdatedAt: now, TTL: time.Minute, ExpiresAt: now.Add(time.Minute), Replica: "old"}
				if err := st.CreateTask(ctx, r); err != nil {
					t.Fatal(err)
				}
				outcome(&r)
				if ok, err := st.UpdateTask(ctx, r); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			id := func(n [nonceLen]byte) string { return formatID(n, idMAC(a.keys[0], n, alice)) }
			if got, out, err := a.Peek(alice, id(nonces[0])); err != nil || got.Status != Completed || string(out.Result) != secretResult {
				t.Fatalf("clear result = %+v %s %v", got, out.Result, err)
			}
			if got, out, err := a.Peek(alice, id(nonces[1])); err != nil || got.Status != Failed || out.Err == nil || out.Err.Message != "boom" {
				t.Fatalf("clear error = %+v %+v %v", got, out.Err, err)
			}
		})
	}
}

func TestSealRoundTrip(t *testing.T) {
	s, err := newSealer([][]byte{rootKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{secretResult, `{}`, `"x"`, ""} {
		sealed := s.seal("00ff", fieldResult, []byte(doc))
		if !json.Valid(sealed) {
			t.Fatalf("sealed value %s is not JSON (the store checks it is)", sealed)
		}
		got, err := s.open("00ff", fieldResult, sealed)
		if err != nil || string(got) != doc {
			t.Fatalf("open(seal(%q)) = %q, %v", doc, got, err)
		}
		if _, err := s.open("00fe", fieldResult, sealed); !errors.Is(err, errSealed) {
			t.Fatalf("opened under another row id: %v", err)
		}
		if _, err := s.open("00ff", fieldInput, sealed); !errors.Is(err, errSealed) {
			t.Fatalf("opened as another field: %v", err)
		}
	}
	if got, err := s.open("00ff", fieldResult, nil); got != nil || err != nil {
		t.Fatalf("open(nil) = %q, %v", got, err)
	}
	if s.seal("00ff", fieldResult, nil) != nil {
		t.Fatal("seal(nil) is not nil")
	}
	if _, err := newSealer([][]byte{[]byte("short")}); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("newSealer(short key) = %v", err)
	}
}

// FuzzOpenSealed: anything the store hands back either opens to what was
// sealed, passes as a clear JSON object (a row from before sealing), or is
// refused; nothing that looks sealed opens unless this sealer made it.
func FuzzOpenSealed(f *testing.F) {
	s, err := newSealer([][]byte{rootKey(1), rootKey(2)})
	if err != nil {
		f.Fatal(err)
	}
	// A genuine seal, made with a fixed nonce so that every fuzz worker
	// knows the same one.
	k := &s.keys[0]
	raw := k.aead.Seal(append(k.id[:], make([]byte, sealNonceLen)...), make([]byte, sealNonceLen), []byte(secretResult), additional("00ff", fieldResult))
	genuine := []byte(`"` + sealPrefix + base64.RawURLEncoding.EncodeToString(raw) + `"`)
	f.Add(genuine, "00ff")
	f.Add([]byte(secretResult), "00ff")
	f.Add([]byte(`"mcpts1."`), "")
	f.Add([]byte(`"mcpts1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"`), "00ff")
	f.Add([]byte(` {"a":1}`), "00ff")
	f.Add([]byte(`{`), "x")
	f.Add([]byte(`[1]`), "x")
	f.Fuzz(func(t *testing.T, stored []byte, row string) {
		got, err := s.open(row, fieldResult, stored)
		if err != nil {
			if !errors.Is(err, errSealed) || got != nil {
				t.Fatalf("open = %q, %v", got, err)
			}
			return
		}
		trimmed := bytes.TrimLeft(stored, " \t\r\n")
		switch {
		case len(trimmed) == 0:
			if got != nil {
				t.Fatalf("empty opened to %q", got)
			}
		case trimmed[0] == '{':
			if !bytes.Equal(got, stored) || !json.Valid(got) {
				t.Fatalf("clear %q opened to %q", stored, got)
			}
		case bytes.Equal(stored, genuine) && row == "00ff":
			if string(got) != secretResult {
				t.Fatalf("the genuine seal opened to %q", got)
			}
		default:
			t.Fatalf("%q opened to %q: a forged seal", stored, got)
		}
		// And sealing anything round-trips under the row.
		if back, err := s.open(row, fieldError, s.seal(row, fieldError, stored)); err != nil || !bytes.Equal(back, stored) {
			t.Fatalf("round trip of %q = %q, %v", stored, back, err)
		}
	})
}

// The pending input and the answers to it are sealed as results are, each
// answer to its task and key: moved, they do not open; never clear.
func TestSealedInputAndAnswers(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			st, _ := be.open(t)
			a := sealedTable(t, st, "A", rootKey(1))
			release := make(chan struct{})
			defer close(release)
			var rows []string
			for range 2 {
				task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{}`), nil)
				if err != nil {
					t.Fatal(err)
				}
				rows = append(rows, rowID(task.ID))
			}
			sh, ctx := a.shared, t.Context()
			input := []byte(`{"q1":{"method":"elicitation/create","params":{"message":"your PIN?"}}}`)
			rec, err := sh.get(ctx, rows[0])
			if err != nil {
				t.Fatal(err)
			}
			rec.Status, rec.Input = store.TaskInputRequired, input
			if ok, err := sh.put(ctx, rec); !ok || err != nil {
				t.Fatalf("put: %v %v", ok, err)
			}
			raw, err := st.GetTask(ctx, rows[0])
			if err != nil || bytes.Contains(raw.Input, []byte("PIN")) || !bytes.HasPrefix(raw.Input, []byte(`"`+sealPrefix)) {
				t.Fatalf("stored input %q, %v: not sealed", raw.Input, err)
			}
			if got, err := sh.get(ctx, rows[0]); err != nil || string(got.Input) != string(input) {
				t.Fatalf("input read back = %q, %v", got.Input, err)
			}

			answer := []byte(`{"action":"accept","content":{"pin":"1234"}}`)
			if err := sh.putAnswers(rows[0], map[string][]byte{"q1": answer}); err != nil {
				t.Fatal(err)
			}
			stored, err := st.TakeTaskAnswers(ctx, rows[0])
			if err != nil || bytes.Contains(stored["q1"], []byte("1234")) || !bytes.HasPrefix(stored["q1"], []byte(`"`+sealPrefix)) {
				t.Fatalf("stored answer %q, %v: not sealed", stored["q1"], err)
			}
			// Moved to another task, or to another key: it does not open.
			for _, moved := range []struct{ row, key string }{{rows[1], "q1"}, {rows[0], "q2"}} {
				if err := st.PutTaskAnswers(ctx, moved.row, map[string][]byte{moved.key: stored["q1"]}); err != nil {
					t.Fatal(err)
				}
				if got, err := sh.takeAnswers(moved.row); !errors.Is(err, ErrStore) || got != nil {
					t.Fatalf("a moved answer (%s) = %q, %v; want ErrStore", moved.key, got, err)
				}
			}
			// Put back where it belongs, it opens, once.
			if err := st.PutTaskAnswers(ctx, rows[0], map[string][]byte{"q1": stored["q1"]}); err != nil {
				t.Fatal(err)
			}
			if got, err := sh.takeAnswers(rows[0]); err != nil || string(got["q1"]) != string(answer) {
				t.Fatalf("takeAnswers = %q, %v", got, err)
			}
			if got, err := sh.takeAnswers(rows[0]); err != nil || len(got) != 0 {
				t.Fatalf("second take = %q, %v", got, err)
			}
			if err := sh.putAnswers("ffff", map[string][]byte{"q1": answer}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("answers to no task: %v", err)
			}
			// A clear input or answer written into the store is refused.
			raw.Input = []byte(`{"q1":{}}`)
			raw.Status = store.TaskInputRequired
			if ok, err := st.UpdateTask(ctx, raw); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if _, err := sh.get(ctx, rows[0]); !errors.Is(err, ErrStore) {
				t.Fatalf("a clear input: %v, want ErrStore", err)
			}
			if err := st.PutTaskAnswers(ctx, rows[1], map[string][]byte{"q1": answer}); err != nil {
				t.Fatal(err)
			}
			if _, err := sh.takeAnswers(rows[1]); !errors.Is(err, ErrStore) {
				t.Fatalf("a clear answer: %v, want ErrStore", err)
			}
		})
	}
}

// BenchmarkSeal: sealing and opening a stored result of each size.
func BenchmarkSeal(b *testing.B) {
	s, err := newSealer([][]byte{rootKey(1)})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{256, 16 << 10, 1 << 20} {
		doc := append(append([]byte(`{"content":[{"type":"text","text":"`), bytes.Repeat([]byte("x"), size)...), `"}]}`...)
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := s.open("00ff", fieldResult, s.seal("00ff", fieldResult, doc)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
