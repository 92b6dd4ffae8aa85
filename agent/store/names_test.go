package store

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestNamesArePerTenant: two tenants may give their VMs one name; a
// tenant's own duplicate is refused; a lookup by name alone finds the one
// VM or says the name is ambiguous; renaming and deleting keep the index.
func TestNamesArePerTenant(t *testing.T) {
	s, _ := openTemp(t)
	now := time.Now().UTC()
	a, b := sampleVM("vm-a", "web", now), sampleVM("vm-b", "web", now)
	a.Tenant, b.Tenant = "alice", "bob"
	for _, vm := range []*VM{a, b} {
		if err := s.PutVM(vm); err != nil {
			t.Fatalf("put %s: %v", vm.ID, err)
		}
	}
	dup := sampleVM("vm-c", "web", now)
	dup.Tenant = "bob"
	if err := s.PutVM(dup); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("bob's second web: %v, want ErrNameTaken", err)
	}
	if _, err := s.GetVMByName("web"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("web by name alone: %v, want ErrAmbiguous", err)
	}
	if vm, err := s.GetTenantVMByName("bob", "web"); err != nil || vm.ID != "vm-b" {
		t.Fatalf("bob's web = %+v, %v", vm, err)
	}
	if _, err := s.GetTenantVMByName("carol", "web"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("carol's web: %v, want ErrNotFound", err)
	}
	// A name that is a prefix of another is not confused with it.
	if _, err := s.GetVMByName("we"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("we: %v, want ErrNotFound", err)
	}
	if err := s.DeleteVM("vm-a"); err != nil {
		t.Fatal(err)
	}
	if vm, err := s.GetVMByName("web"); err != nil || vm.ID != "vm-b" {
		t.Fatalf("web after alice's went = %+v, %v; want bob's", vm, err)
	}
	b.Name = "api"
	if err := s.PutVM(b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVMByName("web"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("web after the rename: %v, want ErrNotFound", err)
	}
}

// TestOpenRebuildsAVersion1NameIndex: a store written by an agent that
// indexed names alone opens with its index rebuilt per tenant.
func TestOpenRebuildsAVersion1NameIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	vm := sampleVM("vm-1", "web", time.Now().UTC())
	if err := s.PutVM(vm); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// Turn it into what version 1 wrote: the name alone as the key.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		names := tx.Bucket(bucketNames)
		if err := names.Delete(nameKey("web", vm.Tenant)); err != nil {
			return err
		}
		if err := names.Put([]byte("web"), []byte("vm-1")); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint64(nil, 1))
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.GetTenantVMByName(vm.Tenant, "web"); err != nil || got.ID != "vm-1" {
		t.Fatalf("after the upgrade: %+v, %v", got, err)
	}
	if got, err := s.GetVMByName("web"); err != nil || got.ID != "vm-1" {
		t.Fatalf("by name alone after the upgrade: %+v, %v", got, err)
	}
}
