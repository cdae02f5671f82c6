package vault

// Other processes (the replicas of a fleet) serve the entries they read
// from their own cache for up to readTTL. When an entry is changed or
// deleted through one of them, it tells the others which one by its
// EntryID, and they Forget it, so that a revoked connection stops being
// used everywhere at once. An EntryID names an entry without naming its
// person or server: it is the keyed hash the store already names the
// entry by (under the primary key), never the credential.

import "context"

// EntryID is the id of person's entry for server, the same in every
// process with the same primary key.
func (v *Vault) EntryID(person, server string) string {
	return v.ring.primary().name(person, server)
}

// Forget drops the cached entry whose EntryID is id, if any; the next
// read goes to the store.
func (v *Vault) Forget(id string) {
	k := v.ring.primary()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen++ // a read under way may have read the old entry
	for mid, o := range v.opened {
		if k.name(o.e.Person, o.e.Server) == id {
			delete(v.opened, mid)
		}
	}
}

// ForgetAll drops every cached entry (another process may have changed
// any of them unseen).
func (v *Vault) ForgetAll() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen++
	clear(v.opened)
}

// OnChange makes fn hear the EntryID of every entry this process writes
// or deletes (deleted), after its own cached copy is gone: whoever
// announces changes to the other processes (the admin API's bus) hooks
// in here, so that no writer (the admin API, the connect flow, a
// refresh, a last-use stamp) has to remember to. Call it before the
// vault is used; fn must not call back into the vault for that entry (it
// runs under the entry's lock, so it should not wait long for a write:
// writes happen on the call path). fn gets the context of the write or
// delete.
func (v *Vault) OnChange(fn func(ctx context.Context, id string, deleted bool)) { v.onChange = fn }

// changed tells OnChange's fn about person's entry for server, with the
// context of the write or delete (whose request the change is part of).
func (v *Vault) changed(ctx context.Context, person, server string, deleted bool) {
	if v.onChange != nil {
		v.onChange(ctx, v.EntryID(person, server), deleted)
	}
}
