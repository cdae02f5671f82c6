// Package pgtest runs a throwaway PostgreSQL server for tests: one per test
// binary, started on first use, with a fresh database per test. The server
// lives in a temporary directory, listens only on a unix socket there
// (listen_addresses = ”), runs with fsync off, and is stopped with
// pg_ctl stop -m immediate when the tests end.
//
// Use it from a package's TestMain, so the server is stopped even when
// tests fail:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// and in a test:
//
//	dsn := pgtest.DSN(t) // a new, empty database; dropped after t
//
// PostgreSQL refuses to run as root: as root, initdb and pg_ctl run as the
// postgres system user (the child processes get its uid and gid directly,
// no shell or su in between) and the directory is handed to that user.
//
// When PostgreSQL cannot be started (not installed, no postgres user, ...)
// DSN skips the test with the reason, unless CI=true or MCPGATE_REQUIRE_PG=1,
// when it fails it: CI must not pass by skipping. The binaries are found
// through MCPGATE_PG_BIN (a directory), then PATH, then
// /usr/lib/postgresql/<newest>/bin (Debian's layout).
//
// A test binary that dies without returning from TestMain (a panic, a
// -timeout) leaves its server behind; the next Start stops servers whose
// test binary is gone and removes their directories.
package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Superuser is the server's superuser, reachable without a password.
const Superuser = "postgres"

// PasswordUser is a role that must log in with Server.Password (scram),
// for tests of what a DSN's password may reach.
const PasswordUser = "mcpgate_pw"

// dirPrefix names the server directories, so stale ones can be found.
const dirPrefix = "mcpgate-pg-"

// ownerFile in a server directory holds the pid of the test binary that
// started it.
const ownerFile = "owner.pid"

// Server is a running throwaway PostgreSQL server.
type Server struct {
	dir      string // the temp root: data/, the socket, server.log
	bin      string // directory of initdb and pg_ctl
	port     int
	cred     *syscall.Credential // the postgres user's, when running as root
	password string              // PasswordUser's
	admin    *pgxpool.Pool       // the superuser on database postgres
	dbs      atomic.Int64
}

var (
	once      sync.Once
	server    *Server
	serverErr error
)

// Main runs the package's tests, then stops the server if a test started
// one. Its result is the exit code for os.Exit.
func Main(m *testing.M) int {
	code := m.Run()
	if server != nil {
		if err := server.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}
	return code
}

// Required reports whether a test must fail, not skip, when PostgreSQL
// cannot be started: CI=true or MCPGATE_REQUIRE_PG=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("MCPGATE_REQUIRE_PG") == "1"
}

// Get returns the test binary's server, starting it on first use; it skips
// or fails t (see Required) when that is not possible.
func Get(t testing.TB) *Server {
	t.Helper()
	once.Do(func() { server, serverErr = Start() })
	if serverErr != nil {
		if Required() {
			t.Fatalf("PostgreSQL is required here (CI=true or MCPGATE_REQUIRE_PG=1) but could not be started: %v", serverErr)
		}
		t.Skipf("PostgreSQL not available (set MCPGATE_REQUIRE_PG=1 to fail instead): %v", serverErr)
	}
	return server
}

// DSN returns the DSN of a new, empty database on the test binary's
// server, as the superuser; the database is dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	s := Get(t)
	return s.DSN(s.NewDatabase(t), Superuser, "")
}

// NewDatabase creates an empty database, dropped when t ends (after the
// cleanups t registers later, such as closing a store on it).
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", s.dbs.Add(1))
	ctx := context.Background()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := s.admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return name
}

// DSN returns a key=value DSN for database db as user, over the server's
// socket; password may be empty.
func (s *Server) DSN(db, user, password string) string {
	kv := []string{
		"host=" + quote(s.dir),
		"port=" + strconv.Itoa(s.port),
		"dbname=" + quote(db),
		"user=" + quote(user),
		"sslmode=disable",
	}
	if password != "" {
		kv = append(kv, "password="+quote(password))
	}
	return strings.Join(kv, " ")
}

// Password is PasswordUser's password.
func (s *Server) Password() string { return s.password }

// Exec runs sql as the superuser on database db (for a test's setup).
func (s *Server) Exec(t testing.TB, db, sql string, args ...any) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, s.DSN(db, Superuser, ""))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// quote quotes a libpq key=value value.
func quote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// Start initialises and starts a new server. Most callers want Get or DSN,
// which share one server per test binary.
func Start() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	base := tempBase(cred != nil)
	reapStale(base, bin, cred)

	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, port: 5432, cred: cred, password: randomPassword()}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	if err := os.WriteFile(filepath.Join(s.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := s.run("initdb", "-D", data, "-U", Superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return fmt.Errorf("initdb: %v: %s", err, lastLines(out, 10))
	}
	// Settings go in the config files, not on pg_ctl's -o (which a shell
	// splits): the socket directory is a path.
	conf := strings.Join([]string{
		"",
		"# pgtest: a throwaway server for tests",
		"listen_addresses = ''",
		"unix_socket_directories = " + confQuote(s.dir),
		"port = " + strconv.Itoa(s.port),
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"max_connections = 200",
		"shared_buffers = 16MB",
		"max_wal_size = 256MB",
		"log_min_messages = warning",
		"",
	}, "\n")
	if err := appendFile(filepath.Join(data, "postgresql.conf"), conf); err != nil {
		return err
	}
	// PasswordUser must prove its password; everyone else is trusted.
	hba := "local all " + PasswordUser + " scram-sha-256\nlocal all all trust\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(filepath.Join(data, "pg_hba.conf"), int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	logFile := filepath.Join(s.dir, "server.log")
	if out, err := s.run("pg_ctl", "-D", data, "-l", logFile, "-w", "-t", "60", "start"); err != nil {
		b, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl start: %v: %s %s", err, lastLines(out, 5), lastLines(b, 10))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(s.DSN("postgres", Superuser, ""))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	if s.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if _, err := s.admin.Exec(ctx, "CREATE ROLE "+PasswordUser+" LOGIN CREATEDB PASSWORD '"+s.password+"'"); err != nil {
		return fmt.Errorf("create role: %w", err)
	}
	return nil
}

// Stop stops the server at once (-m immediate: nothing to keep) and
// removes its directory.
func (s *Server) Stop() error {
	if s.admin != nil {
		s.admin.Close()
	}
	var errs []error
	if _, err := os.Stat(filepath.Join(s.dir, "data", "postmaster.pid")); err == nil {
		if out, err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop"); err != nil {
			errs = append(errs, fmt.Errorf("pg_ctl stop: %v: %s", err, lastLines(out, 5)))
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// run runs a PostgreSQL program as the server's user: arguments go to the
// program as they are, no shell.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	return runIn(s.dir, s.bin, s.cred, prog, args...)
}

func runIn(dir, bin string, cred *syscall.Credential, prog string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(bin, prog), args...)
	cmd.Dir = dir // readable by the postgres user, unlike the test's cwd perhaps
	cmd.Env = cleanEnv()
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return cmd.CombinedOutput()
}

// cleanEnv is the environment without libpq's PG* variables, which would
// point the tools elsewhere, and with the C locale.
func cleanEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=")
	})
	return append(env, "LC_ALL=C", "LANG=C")
}

// runAs returns the credential to run PostgreSQL with: nil unless the
// tests run as root, then the postgres system user's.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL will not: no postgres user to run it as (%v)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres user: uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// findBin finds the directory holding initdb and pg_ctl.
func findBin() (string, error) {
	if d := os.Getenv("MCPGATE_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("MCPGATE_PG_BIN: %w", err)
		}
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	best, bestV := "", -1
	for _, p := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		if err == nil && v > bestV {
			best, bestV = filepath.Dir(p), v
		}
	}
	if best == "" {
		return "", errors.New("initdb not found (install PostgreSQL: apt-get install postgresql, or set MCPGATE_PG_BIN)")
	}
	return best, nil
}

// tempBase is where server directories go: the temp dir, unless the
// postgres user could not reach it or a socket path there would be too
// long for a unix socket (107 bytes), then /tmp.
func tempBase(asOther bool) string {
	base := os.TempDir()
	if len(base)+len("/"+dirPrefix+"0123456789/.s.PGSQL.5432") > 100 {
		return "/tmp"
	}
	if asOther {
		for d := base; ; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil || fi.Mode().Perm()&0o001 == 0 {
				return "/tmp"
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return base
}

// reapStale stops the servers of test binaries that died without stopping
// them, and removes their directories.
func reapStale(base, bin string, cred *syscall.Credential) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being set up, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || alive(pid) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			runIn(dir, bin, cred, "pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "immediate", "-w", "stop")
		}
		os.RemoveAll(dir)
	}
}

// alive reports whether pid runs. A zombie does not: a killed test binary
// stays one until its parent (perhaps a container's init) reaps it.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		_, noProc := os.Stat("/proc/self")
		return noProc != nil // gone since, unless there is no /proc to ask
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// confQuote quotes a postgresql.conf string value.
func confQuote(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// randomPassword is base32: nothing to escape in SQL or a DSN.
func randomPassword() string { return "pw" + rand.Text() }

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
