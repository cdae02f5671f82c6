package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// JSONL is a Sink writing one JSON object per line to a file, rotated by
// size: before a write would take the file past MaxSize it is renamed
// path.1 (path.1 becomes path.2, ..., path.MaxFiles is removed) and a new
// one started. Files are created 0600, the directory 0700: records name
// callers, and may carry (redacted) arguments.
type JSONL struct {
	path     string
	maxSize  int64
	maxFiles int
	f        *os.File
	size     int64
	buf      []byte
}

var _ Sink = (*JSONL)(nil)

// NewJSONL opens (appending) or creates the file at path. maxSize <= 0
// means 100MiB, maxFiles <= 0 means 5.
func NewJSONL(path string, maxSize int64, maxFiles int) (*JSONL, error) {
	if maxSize <= 0 {
		maxSize = 100 << 20
	}
	if maxFiles <= 0 {
		maxFiles = 5
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit export: %w", err)
	}
	j := &JSONL{path: path, maxSize: maxSize, maxFiles: maxFiles}
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *JSONL) open() error {
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit export: %w", err)
	}
	j.f, j.size = f, st.Size()
	return nil
}

// Send appends batch, one line per record, rotating as needed.
func (j *JSONL) Send(_ context.Context, batch []Entry) error {
	if j.f == nil {
		if err := j.open(); err != nil { // a failed rotation: try again
			return err
		}
	}
	j.buf = j.buf[:0]
	for i := range batch {
		start := len(j.buf)
		b, err := appendRecord(j.buf, &batch[i])
		if err != nil {
			j.buf = j.buf[:start]
			continue // a record that does not encode (bad arguments) must not sink the rest
		}
		j.buf = append(b, '\n')
		line := int64(len(j.buf) - start)
		if j.size+int64(start)+line > j.maxSize && j.size+int64(start) > 0 {
			// Write what precedes the line, then rotate before it.
			if err := j.write(j.buf[:start]); err != nil {
				return err
			}
			if err := j.rotate(); err != nil {
				return err
			}
			j.buf = append(j.buf[:0], j.buf[start:]...)
		}
	}
	return j.write(j.buf)
}

func (j *JSONL) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	n, err := j.f.Write(b)
	j.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	return nil
}

// rotate shifts path.i to path.i+1 (dropping path.maxFiles), renames the
// live file path.1 and opens a new one.
func (j *JSONL) rotate() error {
	err := j.f.Sync()
	err = errors.Join(err, j.f.Close())
	j.f = nil
	name := func(i int) string { return j.path + "." + strconv.Itoa(i) }
	if rerr := os.Remove(name(j.maxFiles)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	for i := j.maxFiles - 1; i >= 1; i-- {
		if rerr := os.Rename(name(i), name(i+1)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	if rerr := os.Rename(j.path, name(1)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if oerr := j.open(); oerr != nil {
		return errors.Join(err, oerr)
	}
	if err != nil {
		return fmt.Errorf("audit export: rotate: %w", err)
	}
	return nil
}

// Flush fsyncs the file.
func (j *JSONL) Flush() error {
	if j.f == nil {
		return nil
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	return nil
}

// Close syncs and closes the file.
func (j *JSONL) Close() error {
	if j.f == nil {
		return nil
	}
	err := errors.Join(j.f.Sync(), j.f.Close())
	j.f = nil
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	return nil
}
