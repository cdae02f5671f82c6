package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/clientconf"
)

// connectCommand prints the entry that points a client at mcpgate, or
// merges it into the client's config file (after a backup).
type connectCommand struct {
	stdout, stderr io.Writer
	now            func() time.Time // nil: time.Now
}

// keyRef is a --key that names a variable: ${NAME} or $NAME.
var keyRef = regexp.MustCompile(`^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$`)

func (c *connectCommand) Run(_ context.Context, args []string) error {
	fl := flag.NewFlagSet("connect", flag.ContinueOnError)
	route := fl.String("route", "", "the gateway route: /mcp (default), a server (notes), servers (a,b), a toolset (toolset/support) or a path")
	key := fl.String("key", "", "the gateway key: ${VAR} references a variable (default ${"+clientconf.DefaultKeyVar+"}); a literal key is written into the entry")
	base := fl.String("url", envOr("MCPGATE_URL", "http://127.0.0.1:4000"), "the gateway's URL (default $MCPGATE_URL, else http://127.0.0.1:4000)")
	name := fl.String("name", clientconf.DefaultEntryName, "the entry's name in the client's config")
	write := fl.Bool("write", false, "merge the entry into the client's config file (a backup is written first)")
	file := fl.String("file", "", "the client's config file (default: the client's usual place)")
	client, err := parseWithArg(fl, args, "CLIENT")
	if err != nil {
		return err
	}
	format, err := clientconf.ParseFormat(client)
	if err != nil {
		return &usageError{err.Error()}
	}
	endpoint, err := endpointURL(*base, *route)
	if err != nil {
		return &usageError{err.Error()}
	}
	t := clientconf.Target{Name: *name, URL: endpoint}
	if m := keyRef.FindStringSubmatch(*key); m != nil {
		t.KeyVar = m[1] + m[2]
	} else if *key != "" {
		t.Key = *key
	}
	if !*write {
		if t.Key != "" {
			fmt.Fprintln(c.stderr, "mcpgate connect: warning: the entry holds the key itself; prefer --key '${VAR}'")
		}
		_, err := c.stdout.Write(clientconf.Document(format, t))
		return err
	}
	path := *file
	if path == "" {
		if path, err = defaultClientPath(format); err != nil {
			return err
		}
	}
	existing, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	merged, lostComments, err := clientconf.MergeEntry(existing, format, t)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(merged, existing) {
		fmt.Fprintf(c.stdout, "%s: entry %s already up to date\n", path, t.Name)
		return nil
	}
	backup := ""
	if existing != nil {
		if backup, err = c.backup(path, existing); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(path, merged); err != nil {
		return err
	}
	if lostComments {
		fmt.Fprintf(c.stderr, "mcpgate connect: warning: %s had comments or trailing commas, which JSON cannot keep; they are in the backup\n", path)
	}
	if t.Key != "" {
		fmt.Fprintf(c.stderr, "mcpgate connect: warning: %s now holds the gateway key itself; anyone who can read it can use the key (prefer --key '${VAR}')\n", path)
	}
	if backup != "" {
		fmt.Fprintf(c.stdout, "%s: entry %s written (backup %s)\n", path, t.Name, backup)
	} else {
		fmt.Fprintf(c.stdout, "%s: created with entry %s\n", path, t.Name)
	}
	if t.Key == "" && format != clientconf.VSCode {
		fmt.Fprintf(c.stdout, "Set %s to your gateway key where %s runs.\n", orDefault(t.KeyVar, clientconf.DefaultKeyVar), format)
	}
	return nil
}

// backup copies the client file to FILE.bak-<UTC time>, mode kept.
func (c *connectCommand) backup(path string, data []byte) (string, error) {
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	mode := fs.FileMode(0o600)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	stamp := now().UTC().Format("20060102T150405Z")
	for i := 0; ; i++ {
		name := path + ".bak-" + stamp
		if i > 0 {
			name = fmt.Sprintf("%s-%d", name, i)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("backup: %w", err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return "", fmt.Errorf("backup: %w", err)
		}
		return name, f.Close()
	}
}

// endpointURL joins the gateway's URL and a route into its MCP endpoint.
func endpointURL(base, route string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("--url: want an http or https URL")
	}
	if p := strings.TrimRight(u.Path, "/"); p != "" {
		if route != "" {
			return "", errors.New("--url already has a path: leave out --route, or give the gateway's base URL")
		}
		return u.String(), nil
	}
	switch {
	case route == "":
		u.Path = "/mcp"
	case strings.HasPrefix(route, "/"):
		u.Path = route
	case strings.HasPrefix(route, "toolset/"):
		u.Path = "/" + strings.TrimSuffix(route, "/mcp") + "/mcp"
	default:
		u.Path = "/mcp/" + route
	}
	return u.String(), nil
}

func defaultClientPath(f clientconf.Format) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory (give --file): %w", err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return clientconf.DefaultPath(f, runtime.GOOS, home, os.Getenv("APPDATA"), cwd), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
