package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func sampleVM(id, name string, created time.Time) *VM {
	return &VM{
		ID:        id,
		Name:      name,
		Driver:    "qemu",
		Spec:      json.RawMessage(`{"image":"/var/cache/fluxvm/images/debian","vcpus":2,"memory_mib":512}`),
		Tenant:    "acme",
		Labels:    map[string]string{"role": "ci"},
		Handle:    []byte{0, 1, 2, 0xff},
		State:     "running",
		CreatedAt: created,
		StartedAt: created.Add(3 * time.Second),
		ExpiresAt: created.Add(24 * time.Hour),
		LastError: "boot timed out once",
	}
}

// equalVM compares records, times by instant (JSON drops the monotonic clock
// and may change the location).
func equalVM(t *testing.T, got, want *VM) {
	t.Helper()
	g, w := *got, *want
	for _, p := range []struct{ g, w *time.Time }{{&g.CreatedAt, &w.CreatedAt}, {&g.StartedAt, &w.StartedAt}, {&g.ExpiresAt, &w.ExpiresAt}} {
		if !p.g.Equal(*p.w) {
			t.Errorf("time %v, want %v", *p.g, *p.w)
		}
		*p.g, *p.w = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("vm = %+v\nwant %+v", g, w)
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	s, _ := openTemp(t)
	now := time.Now()
	want := sampleVM("vm-1", "web", now)
	if err := s.PutVM(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetVM("vm-1")
	if err != nil {
		t.Fatal(err)
	}
	equalVM(t, got, want)
	byName, err := s.GetVMByName("web")
	if err != nil {
		t.Fatal(err)
	}
	equalVM(t, byName, want)

	// Zero times stay zero.
	bare := &VM{ID: "vm-2", Name: "bare", Driver: "sim", State: "created"}
	if err := s.PutVM(bare); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetVM("vm-2")
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.IsZero() || !got.StartedAt.IsZero() || !got.ExpiresAt.IsZero() || got.Handle != nil {
		t.Errorf("bare vm came back as %+v", got)
	}
}

func TestNotFound(t *testing.T) {
	s, _ := openTemp(t)
	if _, err := s.GetVM("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetVM: %v, want ErrNotFound", err)
	}
	if _, err := s.GetVMByName("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetVMByName: %v, want ErrNotFound", err)
	}
	if _, err := s.GetVMByName(""); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetVMByName(\"\"): %v, want ErrNotFound", err)
	}
	if err := s.DeleteVM("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteVM: %v, want ErrNotFound", err)
	}
	if err := s.SetHandle("nope", []byte("h")); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetHandle: %v, want ErrNotFound", err)
	}
	if err := s.AppendEvent("nope", "k", "m", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("AppendEvent: %v, want ErrNotFound", err)
	}
	if _, err := s.Events("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Events: %v, want ErrNotFound", err)
	}
	if err := s.PutVM(&VM{Name: "no-id"}); err == nil {
		t.Error("PutVM accepted a VM without ID")
	}
}

func TestNameIndex(t *testing.T) {
	s, _ := openTemp(t)
	now := time.Now()
	if err := s.PutVM(sampleVM("vm-1", "web", now)); err != nil {
		t.Fatal(err)
	}
	// Another ID with the same name is refused and changes nothing.
	err := s.PutVM(sampleVM("vm-2", "web", now))
	if !errors.Is(err, ErrNameTaken) {
		t.Fatalf("PutVM of a taken name: %v, want ErrNameTaken", err)
	}
	if _, err := s.GetVM("vm-2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused VM was stored: %v", err)
	}
	// The owner may write itself again under the same name.
	if err := s.PutVM(sampleVM("vm-1", "web", now)); err != nil {
		t.Fatalf("re-put of the owner: %v", err)
	}
	// Renaming frees the old name.
	if err := s.PutVM(sampleVM("vm-1", "api", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVMByName("web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old name still resolves: %v", err)
	}
	if vm, err := s.GetVMByName("api"); err != nil || vm.ID != "vm-1" {
		t.Errorf("new name: %v %v", vm, err)
	}
	if err := s.PutVM(sampleVM("vm-2", "web", now)); err != nil {
		t.Errorf("freed name refused: %v", err)
	}
	// Deleting frees the name too.
	if err := s.DeleteVM("vm-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVMByName("api"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted VM's name still resolves: %v", err)
	}
	if err := s.PutVM(sampleVM("vm-3", "api", now)); err != nil {
		t.Errorf("name of a deleted VM refused: %v", err)
	}
	// Unnamed VMs do not collide with each other.
	for _, id := range []string{"vm-4", "vm-5"} {
		if err := s.PutVM(&VM{ID: id}); err != nil {
			t.Errorf("unnamed %s: %v", id, err)
		}
	}
}

func TestListVMsSortedByCreation(t *testing.T) {
	s, _ := openTemp(t)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// IDs sort the other way round from creation, so key order cannot pass.
	for i, id := range []string{"d", "c", "b", "a"} {
		if err := s.PutVM(sampleVM(id, "n-"+id, base.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutVM(sampleVM("e", "n-e", base)); err != nil { // same time as "d": ID breaks the tie
		t.Fatal(err)
	}
	vms, err := s.ListVMs()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, vm := range vms {
		ids = append(ids, vm.ID)
	}
	if got := strings.Join(ids, ","); got != "d,e,c,b,a" {
		t.Errorf("order = %s, want d,e,c,b,a", got)
	}
}

func TestSetHandle(t *testing.T) {
	s, _ := openTemp(t)
	vm := sampleVM("vm-1", "web", time.Now())
	if err := s.PutVM(vm); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHandle("vm-1", []byte(`{"pid":42,"qmp":"/x/qmp.sock"}`)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetVM("vm-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Handle) != `{"pid":42,"qmp":"/x/qmp.sock"}` {
		t.Errorf("handle = %q", got.Handle)
	}
	vm.Handle = got.Handle
	equalVM(t, got, vm) // nothing else changed
}

func TestEventsKeepLast200(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutVM(sampleVM("vm-1", "web", time.Now())); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events("vm-1"); err != nil || len(evs) != 0 {
		t.Fatalf("fresh VM events = %v, %v", evs, err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = MaxEventsPerVM + 25
	for i := 1; i <= n; i++ {
		if err := s.AppendEvent("vm-1", "state", fmt.Sprintf("event %d", i), base.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.Events("vm-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != MaxEventsPerVM {
		t.Fatalf("kept %d events, want %d", len(evs), MaxEventsPerVM)
	}
	for i, e := range evs {
		want := n - MaxEventsPerVM + 1 + i
		if e.Seq != uint64(want) || e.Message != fmt.Sprintf("event %d", want) || e.Kind != "state" ||
			!e.At.Equal(base.Add(time.Duration(want)*time.Second)) {
			t.Fatalf("event %d = %+v, want event %d", i, e, want)
		}
	}
	// Deleting the VM drops its history; a new VM with the same ID starts empty.
	if err := s.DeleteVM("vm-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutVM(sampleVM("vm-1", "web", time.Now())); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events("vm-1"); err != nil || len(evs) != 0 {
		t.Errorf("events after delete and re-create = %d, %v", len(evs), err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleVM("vm-1", "web", time.Now())
	if err := s.PutVM(want); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent("vm-1", "recovered", "found running", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetVMByName("web")
	if err != nil {
		t.Fatal(err)
	}
	equalVM(t, got, want)
	evs, err := s.Events("vm-1")
	if err != nil || len(evs) != 1 || evs[0].Kind != "recovered" {
		t.Errorf("events after reopen = %v, %v", evs, err)
	}
	// Sequence numbers continue after a reopen.
	if err := s.AppendEvent("vm-1", "x", "y", time.Now()); err != nil {
		t.Fatal(err)
	}
	if evs, _ := s.Events("vm-1"); len(evs) != 2 || evs[1].Seq != 2 {
		t.Errorf("events = %+v", evs)
	}
}

func TestFileMode0600(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new store mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	// A file left too open (by an admin's copy, say) is tightened.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("reopened store mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

func TestSecondOpenFailsClearly(t *testing.T) {
	s, path := openTemp(t)
	start := time.Now()
	s2, err := Open(path)
	elapsed := time.Since(start)
	if err == nil {
		_ = s2.Close()
		t.Fatal("a second Open of a held store succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "another fluxvm-agent holds "+path) {
		t.Errorf("error = %v, want ErrLocked naming %s", err, path)
	}
	if elapsed < lockTimeout/2 || elapsed > 5*time.Second {
		t.Errorf("second Open gave up after %v, want about %v", elapsed, lockTimeout)
	}
	// Once the holder closes, the store opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := Open(path)
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	_ = s3.Close()
}

func TestConcurrentPutVM(t *testing.T) {
	s, _ := openTemp(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("vm-%d-%d", w, i)
				if err := s.PutVM(sampleVM(id, "name-"+id, time.Now())); err != nil {
					errs <- err
				}
				if err := s.AppendEvent(id, "created", "", time.Now()); err != nil {
					errs <- err
				}
			}
		})
	}
	// Racing for one name: exactly one writer wins.
	var won sync.Map
	for w := range workers {
		wg.Go(func() {
			id := fmt.Sprintf("racer-%d", w)
			err := s.PutVM(sampleVM(id, "contested", time.Now()))
			switch {
			case err == nil:
				won.Store(id, true)
			case !errors.Is(err, ErrNameTaken):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	vms, err := s.ListVMs()
	if err != nil {
		t.Fatal(err)
	}
	winners := 0
	won.Range(func(any, any) bool { winners++; return true })
	if winners != 1 {
		t.Errorf("%d writers got the contested name, want 1", winners)
	}
	if len(vms) != workers*each+1 {
		t.Errorf("stored %d VMs, want %d", len(vms), workers*each+1)
	}
	for _, vm := range vms {
		byName, err := s.GetVMByName(vm.Name)
		if err != nil || byName.ID != vm.ID {
			t.Errorf("name index for %s: %v %v", vm.ID, byName, err)
		}
	}
}

// crashChildEnv makes the test binary act as an agent that writes and then
// dies without closing the store.
const crashChildEnv = "FLUXVM_STORE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		s, err := Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		vm := sampleVM("vm-crash", "survivor", time.Now())
		vm.Handle = nil
		if err := s.PutVM(vm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := s.SetHandle("vm-crash", []byte("handle-after-start")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(3) // no Close: the process dies holding the file
	}
	os.Exit(m.Run())
}

// TestCommittedDataSurvivesProcessDeath runs a child process that writes, gets
// its commits acknowledged and exits without Close. The parent must then open
// the store at once (the dead process's lock is gone) and find every write.
func TestCommittedDataSurvivesProcessDeath(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("child: %v\n%s", err, out)
	}
	start := time.Now()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Open after the holder died waited %v", d)
	}
	vm, err := s.GetVMByName("survivor")
	if err != nil {
		t.Fatal(err)
	}
	if vm.ID != "vm-crash" || string(vm.Handle) != "handle-after-start" {
		t.Errorf("after the crash: %+v", vm)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(keySchema, binary.BigEndian.AppendUint64(nil, schemaVersion+1))
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path); err == nil {
		_ = s.Close()
		t.Fatal("Open accepted a store from a newer agent")
	} else if !strings.Contains(err.Error(), "newer than this fluxvm-agent") {
		t.Errorf("error = %v", err)
	}
}

func TestOpenRejectsGarbageFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte(strings.Repeat("not a bolt file ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path); err == nil {
		_ = s.Close()
		t.Fatal("Open accepted a file that is not a store")
	} else if !strings.Contains(err.Error(), path) {
		t.Errorf("error does not name the file: %v", err)
	}
}

// TestSetStateNeverResurrects checks that a state change racing with a
// delete cannot bring the record back.
func TestSetStateNeverResurrects(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutVM(&VM{ID: "vm-1", Name: "one", State: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState("vm-1", "stopped"); err != nil {
		t.Fatal(err)
	}
	if vm, _ := s.GetVM("vm-1"); vm.State != "stopped" || vm.Name != "one" {
		t.Fatalf("after SetState: %+v", vm)
	}
	if err := s.DeleteVM("vm-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState("vm-1", "running"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetState of a deleted vm = %v, want ErrNotFound", err)
	}
	if _, err := s.GetVM("vm-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted vm came back: %v", err)
	}
}
