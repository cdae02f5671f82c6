package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Note is one note.
type Note struct {
	Title   string    `json:"title"`
	Body    string    `json:"body"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Store is a set of notes keyed by title, kept in memory and, if it has a
// file, saved to it as JSON after every change.
type Store struct {
	mu    sync.Mutex
	file  string
	notes map[string]*Note
	now   func() time.Time
}

// ErrNotFound is returned for a title that has no note.
var ErrNotFound = errors.New("note not found")

// OpenStore returns a store backed by file (if not empty), loading the notes
// the file holds; a missing file is an empty store.
func OpenStore(file string) (*Store, error) {
	s := &Store{file: file, notes: map[string]*Note{}, now: time.Now}
	if file == "" {
		return s, nil
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return s, nil
	}
	var notes []*Note
	if err := json.Unmarshal(b, &notes); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	for _, n := range notes {
		if n != nil && n.Title != "" {
			s.notes[n.Title] = n
		}
	}
	return s, nil
}

// Put adds a note, or replaces the body of the note with the same title. It
// reports whether the note is new.
func (s *Store) Put(title, body string) (created bool, err error) {
	if strings.TrimSpace(title) == "" {
		return false, errors.New("title must not be empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	n, ok := s.notes[title]
	if ok {
		old := *n
		n.Body, n.Updated = body, now
		if err := s.saveLocked(); err != nil {
			*n = old
			return false, err
		}
		return false, nil
	}
	s.notes[title] = &Note{Title: title, Body: body, Created: now, Updated: now}
	if err := s.saveLocked(); err != nil {
		delete(s.notes, title)
		return false, err
	}
	return true, nil
}

// Get returns the note with the given title.
func (s *Store) Get(title string) (Note, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.notes[title]
	if !ok {
		return Note{}, fmt.Errorf("%w: %q", ErrNotFound, title)
	}
	return *n, nil
}

// Delete removes the note with the given title.
func (s *Store) Delete(title string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.notes[title]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, title)
	}
	delete(s.notes, title)
	if err := s.saveLocked(); err != nil {
		s.notes[title] = n
		return err
	}
	return nil
}

// List returns all notes sorted by title.
func (s *Store) List() []Note {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked()
}

func (s *Store) listLocked() []Note {
	out := make([]Note, 0, len(s.notes))
	for _, n := range s.notes {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Note) int { return strings.Compare(a.Title, b.Title) })
	return out
}

// Search returns the notes whose title or body contains query, ignoring
// case, sorted by title.
func (s *Store) Search(query string) []Note {
	q := strings.ToLower(query)
	var out []Note
	for _, n := range s.List() {
		if strings.Contains(strings.ToLower(n.Title), q) || strings.Contains(strings.ToLower(n.Body), q) {
			out = append(out, n)
		}
	}
	return out
}

// saveLocked writes the notes to the store's file, atomically.
func (s *Store) saveLocked() error {
	if s.file == "" {
		return nil
	}
	b, err := json.MarshalIndent(s.listLocked(), "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.file), "."+filepath.Base(s.file)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.file)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("saving notes: %w", err)
	}
	return nil
}
