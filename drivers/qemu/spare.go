//go:build linux

package qemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"google.golang.org/protobuf/proto"
)

// Spares: a resume's QEMU started ahead
//
// A clone that resumes a saved guest (CloneVM with resume_memory, then
// StartVM) spends about a third of its time before the guest runs again:
// copying the snapshot's disk into the clone's overlay (qemu-img convert)
// and starting QEMU, which loads some fifty libraries and sets up the
// machine before it answers on QMP. Neither depends on which clone it is.
// So once a memory_file VM holding a saved guest is stopped (a snapshot
// pool's template), and again once a clone resumed from it has answered, the
// driver prepares the next ones: spares, each a workspace under state_dir/spares with
// the disk copied and the record written, and a QEMU started in it with
// -incoming defer, waiting for the saved device state. A spare holds no
// guest: the saved RAM file is mapped but not read until the state loads,
// so it costs QEMU's own memory (about 40 MiB) and the copied disk.
//
// The next CloneVM with resume_memory from the same snapshot, asking for
// nothing a spare cannot give (a network of its own), takes the spare: the
// workspace is renamed to the clone's (QEMU's sockets and open files move
// with the directory) and the record rewritten with the clone's id, name
// and labels; the StartVM that follows feeds that QEMU the state and starts
// the vCPUs. The QEMU keeps the -name and command line it was started with,
// so the record keeps them (vmRecord.StartedIn, QEMUName) for telling it
// apart from another process after a plugin restart.
//
// A snapshot has at most perSnapshot spares, the driver maxSpares in all;
// a clone that finds none ready makes its own QEMU as before. A spare goes
// when its snapshot or source VM is deleted, when it is found stale (the
// snapshot's files are not the ones it opened) or its QEMU gone, when the
// agent stops the plugin process (Close), and, left by a plugin process
// killed outright, when the next one is configured: a spare is never
// recovered. A clone whose QEMU was started ahead but that was never
// started itself before a plugin restart has that QEMU ended when it is
// next loaded, and resumes in one of its own.

// maxSpares bounds the spares one plugin process keeps, and perSnapshot
// those of one snapshot: two, so that a second claim arriving before the
// first claim's replacement is ready still finds one.
const (
	maxSpares   = 4
	perSnapshot = 2
)

// spareKey names the saved guest a spare resumes: a source VM's snapshot.
type spareKey struct{ source, tag string }

// spare is a QEMU started ahead for the next clone resuming key.
type spare struct {
	key   spareKey
	id    string // the id (and -name) it was started as
	ws    string // its workspace, under state_dir/spares
	rec   vmRecord
	spec  *pb.VMSpec
	proc  *process
	accel string
	// ram and state are the saved files as the spare opened them.
	ram, state os.FileInfo
}

// spares are the driver's spares, and the ones being made.
type spares struct {
	mu     sync.Mutex
	ready  map[spareKey][]*spare
	making map[spareKey]int
	// held are the snapshots (a tag of "": every snapshot of the source)
	// whose files are being removed, which no spare may start on (holdSpares);
	// made is signalled whenever a spare being made is done.
	held   map[spareKey]int
	made   *sync.Cond
	closed bool           // Close was called: no more spares
	makers sync.WaitGroup // spares being made
}

// init makes the maps; callers hold mu.
func (ss *spares) init() {
	if ss.ready == nil {
		ss.ready, ss.making, ss.held = map[spareKey][]*spare{}, map[spareKey]int{}, map[spareKey]int{}
		ss.made = sync.NewCond(&ss.mu)
	}
}

// isHeld reports whether key's snapshot is held (holdSpares); callers hold mu.
func (ss *spares) isHeld(key spareKey) bool {
	return ss.held[key] > 0 || ss.held[spareKey{key.source, ""}] > 0
}

// makingFor counts the spares being made for source's snapshot tag (every
// tag when ""); callers hold mu.
func (ss *spares) makingFor(source, tag string) int {
	n := 0
	for k, m := range ss.making {
		if k.source == source && (tag == "" || k.tag == tag) {
			n += m
		}
	}
	return n
}

func (ss *spares) count() int {
	n := 0
	for _, r := range ss.ready {
		n += len(r)
	}
	for _, m := range ss.making {
		n += m
	}
	return n
}

func spareDir(stateDir string) string { return filepath.Join(stateDir, "spares") }

// killSpareProcess ends a spare's QEMU (or one adopted from an earlier
// plugin process) and waits for it.
func killSpareProcess(p *process) {
	_ = p.signal(syscall.SIGKILL)
	p.wait()
}

// discard ends a spare and removes its workspace.
func (s *spare) discard() {
	killSpareProcess(s.proc)
	_ = os.RemoveAll(s.ws)
}

// clearSpares ends the spares an earlier plugin process left under
// stateDir (and removes their workspaces). SetConfig calls it when the state
// directory is first set or changes.
func clearSpares(stateDir string) {
	dir := spareDir(stateDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		ws := filepath.Join(dir, e.Name())
		if p, ok := adoptProcess(ws, "", 0); ok {
			killSpareProcess(p)
		}
		_ = os.RemoveAll(ws)
	}
}

// Close ends every spare, waiting for those being made; the plugin process
// calls it when the agent stops it, so that no QEMU started ahead outlives
// the plugin. The VMs run on.
func (d *Driver) Close() error {
	d.spares.mu.Lock()
	d.spares.closed = true
	d.spares.mu.Unlock()
	// A spare being made ends once made (it sees closed); wait for that, but
	// not for ever: a QEMU that does not start is given up on by startSpare.
	made := make(chan struct{})
	go func() { d.spares.makers.Wait(); close(made) }()
	select {
	case <-made:
	case <-time.After(30 * time.Second):
	}
	d.spares.mu.Lock()
	var gone []*spare
	for k, r := range d.spares.ready {
		gone = append(gone, r...)
		delete(d.spares.ready, k)
	}
	d.spares.mu.Unlock()
	for _, s := range gone {
		s.discard()
	}
	return nil
}

// holdSpares is called before source's snapshot tag (every snapshot when
// tag is "", the whole VM) is removed: it stops spares of it from being
// made, waits for those being made, and ends the ready ones. A QEMU started
// on a saved RAM file that is removed under it would make the file again
// (QEMU creates a missing mem-path), in the source's workspace, and a
// disk copy would read a snapshot being deleted. release lets spares be
// made again (for a later snapshot of the same tag, or a VM of the same id).
func (d *Driver) holdSpares(source, tag string) (release func()) {
	ss := &d.spares
	key := spareKey{source, tag}
	ss.mu.Lock()
	ss.init()
	ss.held[key]++
	for ss.makingFor(source, tag) > 0 {
		ss.made.Wait()
	}
	var gone []*spare
	for k, r := range ss.ready {
		if k.source == source && (tag == "" || k.tag == tag) {
			gone = append(gone, r...)
			delete(ss.ready, k)
		}
	}
	ss.mu.Unlock()
	for _, s := range gone {
		s.discard()
	}
	return func() {
		ss.mu.Lock()
		if ss.held[key]--; ss.held[key] == 0 {
			delete(ss.held, key)
		}
		ss.mu.Unlock()
	}
}

// spareFor reports whether src's snapshot tag may have a spare: a saved
// guest (resume files) of a VM whose clones need nothing of their own that a
// spare would have to know beforehand.
func spareFor(src *vm, tag string) bool {
	if src.spec.GetNetwork().GetMode() == pb.NetworkMode_NETWORK_MODE_TAP || len(src.spec.GetVolumes()) > 0 {
		return false
	}
	return src.hasSnapFiles(tag)
}

// makeSpares prepares spares for the clones of src's snapshot tag, one
// after the other, until it has perSnapshot (counting those being made) or
// the driver maxSpares. It runs in the background (WaitReady starts it once
// a resumed clone answered); failing costs the next clone only the time a
// spare would have saved, so a failure is logged, not returned.
func (d *Driver) makeSpares(src *vm, tag string) {
	key := spareKey{src.id, tag}
	for {
		d.spares.mu.Lock()
		d.spares.init()
		if d.spares.closed || d.spares.isHeld(key) || len(d.spares.ready[key])+d.spares.making[key] >= perSnapshot || d.spares.count() >= maxSpares {
			d.spares.mu.Unlock()
			return
		}
		d.spares.making[key]++
		d.spares.makers.Add(1)
		d.spares.mu.Unlock()
		s, err := d.startSpare(src, tag)
		d.spares.mu.Lock()
		if d.spares.making[key]--; d.spares.making[key] == 0 {
			delete(d.spares.making, key)
		}
		d.spares.made.Broadcast()
		src.mu.Lock()
		gone := src.destroyed
		src.mu.Unlock()
		if err == nil && !gone && (d.spares.closed || s.stale(src) != nil) {
			gone = true // the snapshot was deleted, or the driver closed, while the spare was made
		}
		if err == nil && !gone {
			d.spares.ready[key] = append(d.spares.ready[key], s)
		}
		d.spares.mu.Unlock()
		switch {
		case err != nil:
			d.spares.makers.Done()
			d.logger.Warn("cannot prepare a QEMU ahead for the next resume; the next clone starts its own", "vm", src.id, "snapshot", tag, "error", err)
			return
		case gone:
			s.discard() // the source or snapshot went while the spare was made (their deletion dropped the others)
			d.spares.makers.Done()
			return
		}
		d.spares.makers.Done()
		d.logger.Debug("a QEMU waits for the next resume", "vm", src.id, "snapshot", tag, "spare", s.id, "pid", s.proc.pid)
	}
}

// startSpare makes a spare's workspace as CloneVM would make a clone's, and
// starts its QEMU waiting for the saved state.
func (d *Driver) startSpare(src *vm, tag string) (_ *spare, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, stateDir := d.config()
	if stateDir == "" {
		return nil, errors.New("no state directory")
	}
	accel, err := d.accelerator(ctx)
	if err != nil {
		return nil, err
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s := &spare{key: spareKey{src.id, tag}, id: "spare-" + hex.EncodeToString(b[:])}
	s.ws = filepath.Join(spareDir(stateDir), s.id)
	files := snapFiles(src.ws, tag)
	if s.ram, err = os.Stat(files.RAM); err != nil {
		return nil, err
	}
	if s.state, err = os.Stat(files.State); err != nil {
		return nil, err
	}
	s.spec = driver.CloneSpec(src.spec, &pb.CloneVMRequest{SourceId: src.id, SnapshotTag: tag, Id: s.id, ResumeMemory: true})
	rec, format, err := validateSpec(ctx, cfg, s.spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(spareDir(stateDir), 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.ws, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(s.ws)
		}
	}()
	rec.UUID = newUUID()
	if rec.Backing != "" {
		rec.Disk = filepath.Join(s.ws, overlayFile)
		if rec.Backing != src.rec.Backing {
			format = ""
		}
		if err := d.copyDisk(ctx, src, tag, format, rec.Disk); err != nil {
			return nil, err
		}
	}
	rec.Resume, rec.MemoryFile, rec.NoAnnounce = &files, false, src.rec.NoAnnounce
	if rec.Spec, err = driver.MarshalSpecJSON(s.spec); err != nil {
		return nil, err
	}
	s.rec = *rec
	v := &vm{d: d, id: s.id, ws: s.ws, rec: s.rec, spec: s.spec}
	if err := v.writeRecord(); err != nil {
		return nil, err
	}
	l := v.launch(accel.Accel)
	l.RAMFile, l.RAMShared, l.Incoming = files.RAM, false, true
	if s.proc, err = d.execQEMU(v, cfg.QEMUBinary, l); err != nil {
		return nil, err
	}
	s.accel = accel.Accel
	// Ready once QEMU answers on QMP, waiting for the state: by then it has
	// written its pidfile and made its sockets, all in the workspace that the
	// clone taking it renames.
	if err := s.waitIncoming(ctx); err != nil {
		killSpareProcess(s.proc)
		return nil, fmt.Errorf("%w; qemu said: %s", err, v.qemuLogTail())
	}
	return s, nil
}

// takeSpare gives CloneVM a spare for req, made into the clone: its
// workspace renamed to the clone's and its record rewritten. nil: none is
// ready that fits (CloneVM then makes the clone itself; waiting for one
// being made could cost more than it saves).
func (d *Driver) takeSpare(src *vm, req *pb.CloneVMRequest) *vm {
	key := spareKey{src.id, req.GetSnapshotTag()}
	if _, err := d.lookup(req.GetId()); err == nil {
		return nil // CloneVM says it exists
	}
	for {
		d.spares.mu.Lock()
		var s *spare
		if r := d.spares.ready[key]; len(r) > 0 {
			s, d.spares.ready[key] = r[0], r[1:]
		}
		d.spares.mu.Unlock()
		if s == nil {
			return nil
		}
		v, err := d.adoptSpare(src, s, req)
		if err == nil {
			return v
		}
		d.logger.Debug("a QEMU started ahead does not fit this clone", "vm", req.GetId(), "spare", s.id, "reason", err)
		s.discard()
	}
}

// stale says why s can no longer resume src's snapshot: its files are not
// the ones it opened (deleted, or saved anew), or its QEMU is gone.
func (s *spare) stale(src *vm) error {
	files := snapFiles(src.ws, s.key.tag)
	ram, err1 := os.Stat(files.RAM)
	state, err2 := os.Stat(files.State)
	if err1 != nil || err2 != nil || !os.SameFile(ram, s.ram) || !os.SameFile(state, s.state) ||
		!ram.ModTime().Equal(s.ram.ModTime()) || !state.ModTime().Equal(s.state.ModTime()) {
		return errors.New("the snapshot's files are not the ones it opened")
	}
	if !processAlive(s.proc.pid) {
		return errors.New("its QEMU is gone")
	}
	return nil
}

func (d *Driver) adoptSpare(src *vm, s *spare, req *pb.CloneVMRequest) (*vm, error) {
	want := driver.CloneSpec(src.spec, req)
	have := proto.Clone(s.spec).(*pb.VMSpec)
	have.Id, have.Name, have.Labels = want.Id, want.Name, want.Labels
	if !proto.Equal(have, want) {
		return nil, errors.New("the clone asks for a different vm")
	}
	if err := s.stale(src); err != nil {
		return nil, err
	}
	if _, err := d.lookup(want.Id); err == nil {
		return nil, driver.Errorf(driver.ErrExists, "vm %s already exists", want.Id)
	}
	_, stateDir := d.config()
	ws := workspace(stateDir, want.Id)
	if longest := filepath.Join(ws, agentSock); len(longest) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s too long", longest)
	}
	if err := os.Rename(s.ws, ws); err != nil {
		return nil, err
	}
	rec := s.rec
	rec.StartedIn, rec.QEMUName = s.ws, s.id
	if rec.Disk != "" {
		rec.Disk = filepath.Join(ws, overlayFile)
	}
	var err error
	if rec.Spec, err = driver.MarshalSpecJSON(want); err == nil {
		var data []byte
		if data, err = json.MarshalIndent(rec, "", "  "); err == nil {
			err = writeFileAtomic(filepath.Join(ws, specFile), append(data, '\n'))
		}
	}
	v := &vm{d: d, id: want.Id, ws: ws, rec: rec, spec: want, state: pb.VMState_VM_STATE_CREATED,
		pending: s.proc, pendingAccel: s.accel, resumedFrom: s.key}
	if err == nil && d.register(v) != v {
		err = driver.Errorf(driver.ErrExists, "vm %s already exists", want.Id)
	}
	if err != nil {
		_ = os.Rename(ws, s.ws) // back, for discard to remove
		return nil, err
	}
	d.emit(v.id, pb.EventType_EVENT_TYPE_CREATED, "")
	return v, nil
}

// spareAfterResume prepares spares for the next clones of the saved guest v
// resumed from, in the background, spareDelay after v's guest first
// answered: sooner, the work (a disk copy and a QEMU start) would take CPU
// from the resuming guest or from its answer on the way to the caller.
func (d *Driver) spareAfterResume(v *vm) {
	k := v.resumedFrom
	if k == (spareKey{}) {
		return
	}
	src, err := d.lookup(k.source)
	if err != nil || !spareFor(src, k.tag) {
		return
	}
	time.AfterFunc(spareDelay, func() { d.makeSpares(src, k.tag) })
}

// spareDelay is how long after a resumed clone answered its replacement
// spares are made.
const spareDelay = 100 * time.Millisecond

// waitIncoming waits until the spare's QEMU answers on QMP with the status
// of one waiting for a migration.
func (s *spare) waitIncoming(ctx context.Context) error {
	path := filepath.Join(s.ws, qmpSock)
	for waited := time.Duration(0); ; {
		if !processAlive(s.proc.pid) {
			return errors.New("qemu exited")
		}
		if m, err := dialMonitor(path, time.Second, nil); err == nil {
			st, err := m.queryStatus(ctx)
			m.close()
			if err != nil {
				return err
			}
			if st != "inmigrate" {
				return fmt.Errorf("qemu reports status %q, not waiting for the saved state", st)
			}
			return nil
		}
		pause := monitorPollPause(waited)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		waited += pause
	}
}

// sparesAfterStop prepares spares for a memory_file VM just stopped that
// holds a saved guest: a snapshot pool's template, saved then stopped, is
// what clones resume from next, so its first claim finds a QEMU waiting too.
// Only its latest memory snapshot gets them.
func (d *Driver) sparesAfterStop(id string) {
	v, err := d.lookup(id)
	if err != nil || !v.rec.MemoryFile {
		return
	}
	snaps, err := v.readSnapshots()
	if err != nil {
		return
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].GetMemory() && spareFor(v, snaps[i].GetTag()) {
			go d.makeSpares(v, snaps[i].GetTag())
			return
		}
	}
}
