package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// vault rotate re-seals the entries of the config's data directory under
// the first key, after which the old key can leave the config.
func TestVaultRotate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	key := func(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	t.Setenv("MCPGATE_VAULT_KEY_1", key(1))
	t.Setenv("MCPGATE_VAULT_KEY_2", key(2))
	k1 := config.VaultKey{ID: "k1", Key: key(1)}
	k2 := config.VaultKey{ID: "k2", Key: key(2)}

	data := filepath.Join(dir, "data")
	st, err := sqlite.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	v, err := vault.New(st, []config.VaultKey{k1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"alice", "bob"} {
		e := vault.Entry{Person: p, Server: "github", Kind: vault.KindOAuth, AccessToken: "gho_" + p, Expiry: time.Now().Add(time.Hour)}
		if err := v.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	// Without the entries' key, nothing can be re-encrypted: say which key.
	only2 := writeFile(t, dir, "only2.yaml", "vault: {keys: [{id: k2, key: \"${MCPGATE_VAULT_KEY_2}\"}]}\n")
	var out, errb bytes.Buffer
	if code := run([]string{"vault", "rotate", "--config", only2}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `key id "k1"`) || out.String() != "re-encrypted 0 vault entries under key k2\n" {
		t.Errorf("without k1: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()

	both := writeFile(t, dir, "both.yaml", `vault:
  keys:
    - {id: k2, key: "${MCPGATE_VAULT_KEY_2}"}
    - {id: k1, key: "${MCPGATE_VAULT_KEY_1}"}
`)
	if code := run([]string{"vault", "rotate", "--config", both}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got := out.String(); got != "re-encrypted 2 vault entries under key k2\n" {
		t.Errorf("stdout %q", got)
	}
	out.Reset()
	if code := run([]string{"vault", "rotate", "--config", both}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "re-encrypted 0 ") {
		t.Errorf("second run: exit %d, %q", code, out.String())
	}
	if strings.Contains(out.String()+errb.String(), key(1)) || strings.Contains(out.String()+errb.String(), key(2)) {
		t.Error("output echoes a key")
	}

	// k2 alone reads every entry.
	st, err = sqlite.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, err = vault.New(st, []config.VaultKey{k2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"alice", "bob"} {
		if e, err := v.Get(ctx, p, "github"); err != nil || e.AccessToken != "gho_"+p {
			t.Errorf("%s after rotate: %v", p, err)
		}
	}
}

func TestVaultRotateErrors(t *testing.T) {
	dir := t.TempDir()
	none := writeFile(t, dir, "none.yaml", "servers: {}\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"vault"}, 2, "want a subcommand: rotate"},
		{[]string{"vault", "spin"}, 2, `unknown subcommand "spin"`},
		{[]string{"vault", "rotate"}, 2, "--config is required"},
		{[]string{"vault", "rotate", "--config", none}, 1, "no vault section"},
		{[]string{"vault", "rotate", "--config", filepath.Join(dir, "missing.yaml")}, 1, "missing.yaml"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d, %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
