// Package store is the node agent's local record of its VMs, kept in one
// bbolt file (<state_dir>/agent.db) so that VMs outlive agent restarts.
// Every write is one bbolt transaction, fsync'd when it commits.
package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// FileName is the store's file name inside the agent's state directory.
const FileName = "agent.db"

// MaxEventsPerVM is how many events a VM keeps; older ones are dropped.
const MaxEventsPerVM = 200

// lockTimeout bounds the wait for the file lock, so that a second agent on
// the same state directory fails instead of hanging.
const lockTimeout = time.Second

// schemaVersion is the layout this code writes; a newer file is refused so an
// older agent cannot misread it.
//
// Version 2 keys the name index by name and tenant (names are per tenant);
// Open rebuilds a version 1 index.
const schemaVersion = 2

var (
	// ErrNotFound means no VM has the given ID or name.
	ErrNotFound = errors.New("vm not found")
	// ErrNameTaken means another VM of the same tenant already has the name.
	ErrNameTaken = errors.New("vm name already taken")
	// ErrAmbiguous means several tenants' VMs have the name: use the id.
	ErrAmbiguous = errors.New("several vms have that name")
	// ErrLocked means another process holds the store file.
	ErrLocked = errors.New("store file is locked by another process")
)

var (
	bucketMeta   = []byte("meta")
	bucketVMs    = []byte("vms")      // id -> VM JSON
	bucketNames  = []byte("vm_names") // name NUL tenant -> id (nameKey)
	bucketEvents = []byte("events")   // id -> bucket of seq (8 bytes, big endian) -> Event JSON
	keySchema    = []byte("schema_version")
)

// VM is the agent's record of one VM.
type VM struct {
	// ID is chosen by the agent and never changes.
	ID string `json:"id"`
	// Name is unique among the tenant's VMs on the node (two tenants may
	// use one name); empty names are not indexed.
	Name string `json:"name"`
	// Driver names the plugin that runs the VM.
	Driver string `json:"driver"`
	// Spec is the create request as the API received it.
	Spec json.RawMessage `json:"spec,omitempty"`
	// Tenant owns the VM; empty on a node used without central.
	Tenant string `json:"tenant,omitempty"`
	// Labels are the caller's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Handle is the driver's marshalled handle, opaque to the agent; RecoverVM
	// gets it back after a restart.
	Handle []byte `json:"handle,omitempty"`
	// State is the last state the agent saw.
	State string `json:"state"`
	// CreatedAt, StartedAt and ExpiresAt are zero when not set.
	CreatedAt time.Time `json:"created_at,omitzero"`
	StartedAt time.Time `json:"started_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// LastError is the last failure, for people.
	LastError string `json:"last_error,omitempty"`
	// RecoveryNote says what recovery found after a restart.
	RecoveryNote string `json:"recovery_note,omitempty"`
}

// Event is one entry of a VM's history: a failure, a recovery note, a state change.
type Event struct {
	// Seq orders a VM's events; it grows by one per event.
	Seq uint64 `json:"seq"`
	// At is when it happened.
	At time.Time `json:"at"`
	// Kind is a short machine-readable tag, e.g. "recovered" or "start_failed".
	Kind string `json:"kind"`
	// Message is for people.
	Message string `json:"message"`
}

// Store is the open store. Its methods are safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
}

// Open opens or creates the store file at path with mode 0600, tightening the
// mode of an existing file. If another process holds the file, Open fails
// after one second with ErrLocked.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open store: another fluxvm-agent holds %s (no lock within %s): %w", path, lockTimeout, ErrLocked)
		}
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	fail := func(err error) (*Store, error) {
		_ = db.Close()
		return nil, err
	}
	// bolt.Open applies the mode only when it creates the file.
	fi, err := os.Stat(path)
	if err != nil {
		return fail(fmt.Errorf("open store: %w", err))
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fail(fmt.Errorf("open store: restrict mode of %s: %w", path, err))
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketVMs, bucketNames, bucketEvents} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keySchema); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("%s has a malformed schema version", path)
			}
			got := binary.BigEndian.Uint64(v)
			if got > schemaVersion {
				return fmt.Errorf("%s has schema version %d, newer than this fluxvm-agent's %d; run a newer agent", path, got, schemaVersion)
			}
			if got < 2 {
				if err := rebuildNames(tx); err != nil {
					return fmt.Errorf("%s: rebuild the name index: %w", path, err)
				}
			}
		}
		return meta.Put(keySchema, binary.BigEndian.AppendUint64(nil, schemaVersion))
	})
	if err != nil {
		return fail(fmt.Errorf("open store: %w", err))
	}
	return &Store{db: db, path: path}, nil
}

// nameKey is a VM's key in the name index: its name, NUL, its tenant. A NUL
// is in neither (names are checked by the API), so the name's VMs of every
// tenant share the prefix name+NUL.
func nameKey(name, tenant string) []byte { return []byte(name + "\x00" + tenant) }

// rebuildNames writes the name index afresh from the VM records.
func rebuildNames(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(bucketNames); err != nil {
		return err
	}
	names, err := tx.CreateBucket(bucketNames)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketVMs).ForEach(func(k, v []byte) error {
		var vm VM
		if err := json.Unmarshal(v, &vm); err != nil {
			return fmt.Errorf("decode the record of vm %s: %w", k, err)
		}
		if vm.Name == "" {
			return nil
		}
		return names.Put(nameKey(vm.Name, vm.Tenant), k)
	})
}

// Path is the store file's path.
func (s *Store) Path() string { return s.path }

// Close releases the file and its lock.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

// PutVM inserts or replaces the VM record, keeping the name index in the same
// transaction. A name held by another VM is ErrNameTaken.
func (s *Store) PutVM(vm *VM) error {
	if vm == nil || vm.ID == "" {
		return errors.New("put vm: the VM has no ID")
	}
	data, err := json.Marshal(vm)
	if err != nil {
		return fmt.Errorf("put vm %s: %w", vm.ID, err)
	}
	id := []byte(vm.ID)
	err = s.db.Update(func(tx *bolt.Tx) error {
		vms, names := tx.Bucket(bucketVMs), tx.Bucket(bucketNames)
		if vm.Name != "" {
			if owner := names.Get(nameKey(vm.Name, vm.Tenant)); owner != nil && !bytes.Equal(owner, id) {
				return fmt.Errorf("%w: %q belongs to vm %s", ErrNameTaken, vm.Name, owner)
			}
		}
		if old := vms.Get(id); old != nil {
			var prev VM
			if err := json.Unmarshal(old, &prev); err != nil {
				return fmt.Errorf("decode the stored record: %w", err)
			}
			if prev.Name != "" && (prev.Name != vm.Name || prev.Tenant != vm.Tenant) {
				if err := names.Delete(nameKey(prev.Name, prev.Tenant)); err != nil {
					return err
				}
			}
		}
		if vm.Name != "" {
			if err := names.Put(nameKey(vm.Name, vm.Tenant), id); err != nil {
				return err
			}
		}
		return vms.Put(id, data)
	})
	if err != nil {
		return fmt.Errorf("put vm %s: %w", vm.ID, err)
	}
	return nil
}

// SetState changes the state of an existing VM record and nothing else, in
// one transaction: unlike a read followed by PutVM, it cannot bring back a
// record that a concurrent delete removed. ErrNotFound if there is none.
func (s *Store) SetState(id, state string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		vm, err := getVM(tx, id)
		if err != nil {
			return err
		}
		vm.State = state
		data, err := json.Marshal(vm)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketVMs).Put([]byte(id), data)
	})
	if err != nil {
		return fmt.Errorf("set state of vm %s: %w", id, err)
	}
	return nil
}

// GetVM returns the VM with the ID, or ErrNotFound.
func (s *Store) GetVM(id string) (*VM, error) {
	var vm *VM
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		vm, err = getVM(tx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get vm %s: %w", id, err)
	}
	return vm, nil
}

// GetVMByName returns the VM with the name, whichever its tenant: ErrNotFound
// when there is none, ErrAmbiguous when several tenants use the name.
func (s *Store) GetVMByName(name string) (*VM, error) {
	var vm *VM
	err := s.db.View(func(tx *bolt.Tx) error {
		if name == "" {
			return ErrNotFound
		}
		prefix := nameKey(name, "")
		c := tx.Bucket(bucketNames).Cursor()
		k, id := c.Seek(prefix)
		if k == nil || !bytes.HasPrefix(k, prefix) {
			return ErrNotFound
		}
		if k2, _ := c.Next(); k2 != nil && bytes.HasPrefix(k2, prefix) {
			return ErrAmbiguous
		}
		var err error
		vm, err = getVM(tx, string(id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get vm named %q: %w", name, err)
	}
	return vm, nil
}

// GetTenantVMByName returns the tenant's VM with the name (tenant "" is the
// VMs created without one), or ErrNotFound.
func (s *Store) GetTenantVMByName(tenant, name string) (*VM, error) {
	var vm *VM
	err := s.db.View(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketNames).Get(nameKey(name, tenant))
		if id == nil || name == "" {
			return ErrNotFound
		}
		var err error
		vm, err = getVM(tx, string(id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get vm named %q: %w", name, err)
	}
	return vm, nil
}

func getVM(tx *bolt.Tx, id string) (*VM, error) {
	data := tx.Bucket(bucketVMs).Get([]byte(id))
	if data == nil {
		return nil, ErrNotFound
	}
	vm := new(VM)
	if err := json.Unmarshal(data, vm); err != nil {
		return nil, fmt.Errorf("decode the stored record: %w", err)
	}
	return vm, nil
}

// ListVMs returns every VM, oldest first (by CreatedAt, then ID).
func (s *Store) ListVMs() ([]*VM, error) {
	var vms []*VM
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketVMs).ForEach(func(k, v []byte) error {
			vm := new(VM)
			if err := json.Unmarshal(v, vm); err != nil {
				return fmt.Errorf("decode the record of vm %s: %w", k, err)
			}
			vms = append(vms, vm)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list vms: %w", err)
	}
	slices.SortFunc(vms, func(a, b *VM) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return vms, nil
}

// DeleteVM removes the VM, its name and its events, or returns ErrNotFound.
func (s *Store) DeleteVM(id string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		vm, err := getVM(tx, id)
		if err != nil {
			return err
		}
		if vm.Name != "" {
			names := tx.Bucket(bucketNames)
			if bytes.Equal(names.Get(nameKey(vm.Name, vm.Tenant)), []byte(id)) {
				if err := names.Delete(nameKey(vm.Name, vm.Tenant)); err != nil {
					return err
				}
			}
		}
		events := tx.Bucket(bucketEvents)
		if events.Bucket([]byte(id)) != nil {
			if err := events.DeleteBucket([]byte(id)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketVMs).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete vm %s: %w", id, err)
	}
	return nil
}

// SetHandle records the driver's handle of a VM in one small transaction; the
// agent calls it right after a start so that a crash cannot lose the handle.
func (s *Store) SetHandle(id string, handle []byte) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		vm, err := getVM(tx, id)
		if err != nil {
			return err
		}
		vm.Handle = handle
		data, err := json.Marshal(vm)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketVMs).Put([]byte(id), data)
	})
	if err != nil {
		return fmt.Errorf("set handle of vm %s: %w", id, err)
	}
	return nil
}

// AppendEvent adds an event to the VM's history, dropping the oldest beyond
// MaxEventsPerVM. The VM must exist (ErrNotFound otherwise), so that
// DeleteVM leaves no history behind.
func (s *Store) AppendEvent(vmID, kind, message string, at time.Time) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketVMs).Get([]byte(vmID)) == nil {
			return ErrNotFound
		}
		b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(vmID))
		if err != nil {
			return err
		}
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		data, err := json.Marshal(Event{Seq: seq, At: at, Kind: kind, Message: message})
		if err != nil {
			return err
		}
		if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), data); err != nil {
			return err
		}
		if seq <= MaxEventsPerVM {
			return nil
		}
		// Keys are big-endian sequence numbers, so the cursor walks oldest first.
		keep := binary.BigEndian.AppendUint64(nil, seq-MaxEventsPerVM+1)
		c := b.Cursor()
		for k, _ := c.First(); k != nil && bytes.Compare(k, keep) < 0; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append event to vm %s: %w", vmID, err)
	}
	return nil
}

// Events returns the VM's kept events, oldest first. A VM without events has
// none; an unknown VM is ErrNotFound.
func (s *Store) Events(vmID string) ([]Event, error) {
	var out []Event
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketVMs).Get([]byte(vmID)) == nil {
			return ErrNotFound
		}
		b := tx.Bucket(bucketEvents).Bucket([]byte(vmID))
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode an event: %w", err)
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("events of vm %s: %w", vmID, err)
	}
	return out, nil
}
