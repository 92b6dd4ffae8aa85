package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdMember is one member of a real etcd cluster: its own process
// (central/store/storetest/etcdmember, the etcd server central embeds), its
// own data directory, loopback URLs.
type etcdMember struct {
	t         testing.TB
	name, dir string
	client    string
	peer      string
	args      []string
	bin, log  string
	cmd       *exec.Cmd
	ready     chan struct{}
}

// startEtcdCluster starts n members as n processes and waits until every
// one serves clients. They stop (SIGTERM) when the test ends.
func startEtcdCluster(t testing.TB, n int) []*etcdMember {
	t.Helper()
	bin := drivertest.Build(t, "../..", "./central/store/storetest/etcdmember")
	dir := fxTempDir(t)
	var members []*etcdMember
	var initial []string
	for i := range n {
		m := &etcdMember{t: t, name: fmt.Sprintf("m%d", i+1), bin: bin, client: "http://" + freeAddr(t), peer: "http://" + freeAddr(t)}
		m.dir, m.log = filepath.Join(dir, m.name), filepath.Join(dir, m.name+".log")
		initial = append(initial, m.name+"="+m.peer)
		members = append(members, m)
	}
	for _, m := range members {
		m.args = []string{"-name", m.name, "-data-dir", m.dir, "-client", m.client, "-peer", m.peer, "-initial-cluster", strings.Join(initial, ",")}
		m.start()
		t.Cleanup(func() {
			m.stop()
			if t.Failed() {
				b, _ := os.ReadFile(m.log)
				t.Logf("etcd member %s log:\n%s", m.name, b)
			}
		})
	}
	for _, m := range members {
		m.waitReady(time.Minute)
	}
	return members
}

// start runs the member's process; it announces "ready" on stdout once it
// serves clients, which for a new cluster is once a quorum has formed.
func (m *etcdMember) start() {
	m.t.Helper()
	f, err := os.OpenFile(m.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		m.t.Fatal(err)
	}
	defer f.Close()
	m.cmd = exec.Command(m.bin, m.args...)
	m.cmd.Stderr = f
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.ready = make(chan struct{})
	ready := m.ready
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
	}()
}

func (m *etcdMember) waitReady(timeout time.Duration) {
	m.t.Helper()
	select {
	case <-m.ready:
	case <-time.After(timeout):
		m.t.Fatalf("etcd member %s not ready within %v", m.name, timeout)
	}
}

// kill SIGKILLs the member, as a machine losing power would.
func (m *etcdMember) kill() {
	m.t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		m.t.Fatal(err)
	}
	_ = m.cmd.Wait()
}

func (m *etcdMember) stop() {
	if m.cmd != nil && m.cmd.ProcessState == nil {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		_ = m.cmd.Wait()
	}
}

// raftLeader is the member that leads the cluster now.
func raftLeader(t testing.TB, cli *clientv3.Client, members []*etcdMember) *etcdMember {
	t.Helper()
	for _, m := range members {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := cli.Status(ctx, m.client)
		cancel()
		if err == nil && s.Header.MemberId == s.Leader {
			return m
		}
	}
	t.Fatal("no member of the etcd cluster leads")
	return nil
}

// TestCentralOnAThreeMemberEtcdClusterSurvivesAMemberKilledMidBurst runs two
// centrals (central.Run, as `fluxvm-agent central -etcd-endpoints` runs
// them) on a real three-member etcd cluster, three processes, with three
// real sim nodes. One tenant fires a burst of creates at both centrals
// against its max_vms, and the raft leader's process is SIGKILLed when a
// third of the quota is reached. The API keeps answering: creates after the
// kill succeed until the quota is full. Nothing overshoots: exactly max_vms
// VMs exist, and the nodes' own lists and the ledger name the same VMs. No
// reservation is left, and no ledger entry is lost: the usage report counts
// every VM, and after they are deleted every one has an ended entry. The
// killed member then restarts and catches up. Last, with two members
// killed, /healthz answers 503, and 200 once they are back.
func TestCentralOnAThreeMemberEtcdClusterSurvivesAMemberKilledMidBurst(t *testing.T) {
	members := startEtcdCluster(t, 3)
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.client)
	}
	urls := []string{
		startFxCentral(t, central.Options{EtcdEndpoints: endpoints, ReconcileEvery: time.Hour}),
		startFxCentral(t, central.Options{EtcdEndpoints: endpoints, ReconcileEvery: time.Hour}),
	}
	st := fxStore(t, endpoints) // the test's own client, for what the API does not show
	images, img := fxImages(t)
	var nodes []*fxNode
	for i := range 3 {
		nodes = append(nodes, startFxNode(t, fmt.Sprintf("sim-%d", i+1), urls[i%2], images, 16, 16384))
	}
	fxWaitUp(t, urls[0], "sim-1", "sim-2", "sim-3")
	fxMust(t, "PUT", urls[0]+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	const quota = 30
	tenant, token := fxTenant(t, urls[1], "burst", map[string]int64{"max_vms": quota})

	// The burst: 16 clients, each creating until the quota refuses it three
	// times in a row (a refusal can come from room still reserved by a create
	// that then fails), taking turns between the centrals.
	type result struct {
		code int
		at   time.Time // answered
		took time.Duration
		body []byte
	}
	var (
		mu       sync.Mutex
		results  []result
		created  atomic.Int64
		seq      atomic.Int64
		killedAt atomic.Pointer[time.Time]
	)
	killed := make(chan *etcdMember, 1)
	go func() {
		for created.Load() < quota/3 {
			time.Sleep(time.Millisecond)
		}
		m := raftLeader(t, st.Client(), members)
		now := time.Now()
		m.kill()
		killedAt.Store(&now)
		killed <- m
	}()
	deadline := time.Now().Add(40 * time.Second)
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refused := 0
			for refused < 3 && time.Now().Before(deadline) {
				n := seq.Add(1)
				sent := time.Now()
				code, body := fxCall(t, "POST", urls[(c+int(n))%2]+"/fleet/vms", token, map[string]any{"name": fmt.Sprintf("b-%d", n), "image": "tiny"})
				mu.Lock()
				results = append(results, result{code, time.Now(), time.Since(sent), body})
				mu.Unlock()
				switch code {
				case http.StatusCreated:
					created.Add(1)
					refused = 0
				case http.StatusTooManyRequests:
					refused++
				default:
					refused = 0
				}
			}
		}()
	}
	wg.Wait()
	var dead *etcdMember
	select {
	case dead = <-killed:
	default:
		t.Fatalf("the burst ended with %d created before the kill", created.Load())
	}
	at := *killedAt.Load()
	t.Logf("killed etcd member %s (the raft leader) after %d creates", dead.name, quota/3)

	var createdVMs []sdk.FleetCreateVMResponse
	afterKill, failed := 0, 0
	var slowest time.Duration
	for _, r := range results {
		slowest = max(slowest, r.took)
		switch r.code {
		case http.StatusCreated:
			var v sdk.FleetCreateVMResponse
			if err := json.Unmarshal(r.body, &v); err != nil {
				t.Fatal(err)
			}
			createdVMs = append(createdVMs, v)
			if r.at.After(at) {
				afterKill++
			}
		case http.StatusTooManyRequests:
		default:
			// A create whose etcd call was in flight on the killed member may
			// fail; after the cluster's next leader is elected none should.
			failed++
			t.Logf("create answered %d %s, %v after the kill", r.code, r.body, r.at.Sub(at).Round(time.Millisecond))
			if r.at.Sub(at) > 10*time.Second {
				t.Errorf("a create failed %v after the kill: %d %s", r.at.Sub(at), r.code, r.body)
			}
		}
	}
	t.Logf("%d creates: %d created (%d after the kill), %d failed; the slowest took %v", len(results), len(createdVMs), afterKill, failed,
		slowest.Round(time.Millisecond))
	if afterKill == 0 {
		t.Errorf("no create succeeded after the kill")
	}
	if len(createdVMs) != quota {
		t.Errorf("%d VMs created, want exactly max_vms %d", len(createdVMs), quota)
	}

	// The nodes' own lists, the ledger and the answers agree.
	ctx := context.Background()
	answered := map[string]bool{}
	for _, v := range createdVMs {
		answered[v.Node+"/"+v.VM.ID] = true
	}
	var onNodes []string
	for _, n := range nodes {
		var list sdk.VMList
		fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list)
		for _, vm := range list.VMs {
			if vm.Tenant == tenant {
				onNodes = append(onNodes, n.name+"/"+vm.ID)
			}
		}
	}
	running, err := st.RunningForTenant(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	var inLedger []string
	for _, e := range running {
		inLedger = append(inLedger, e.Node+"/"+e.VMID)
	}
	slices.Sort(onNodes)
	slices.Sort(inLedger)
	if len(onNodes) != quota || !slices.Equal(onNodes, inLedger) {
		t.Fatalf("the nodes run %d of the tenant's VMs and the ledger has %d running, want the same %d:\nnodes  %v\nledger %v",
			len(onNodes), len(inLedger), quota, onNodes, inLedger)
	}
	for _, k := range onNodes {
		if !answered[k] {
			t.Errorf("VM %s runs, but no create answered it", k)
		}
	}
	if rs, err := st.ListReservations(ctx); err != nil || len(rs) != 0 {
		t.Errorf("reservations left: %v %v", rs, err)
	}
	for _, u := range urls {
		var h struct{ Status, Etcd string }
		fxMust(t, "GET", u+"/healthz", "", nil, http.StatusOK, &h)
		if h.Etcd != "ok" {
			t.Errorf("%s/healthz: %+v", u, h)
		}
	}
	// Usage counts whole seconds: a window to an hour from now counts the
	// starts of this second too.
	var usage sdk.UsageReport
	window := "?from=" + time.Now().UTC().Add(-time.Hour).Format(time.RFC3339) + "&to=" + time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	fxMust(t, "GET", urls[0]+"/fleet/usage"+window, token, nil, http.StatusOK, &usage)
	if len(usage.Tenants) != 1 || usage.Tenants[0].VMsStarted != quota {
		t.Errorf("usage report: %+v, want %d VMs started", usage.Tenants, quota)
	}

	// The killed member comes back and catches up with what was written
	// without it.
	dead.start()
	dead.waitReady(30 * time.Second)
	only, err := clientv3.New(clientv3.Config{Endpoints: []string{dead.client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	fxWait(t, "the restarted member has the ledger", 20*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		// Serializable: the member answers from its own copy.
		r, err := only.Get(cctx, st.Prefix()+"running/tenant/"+tenant+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		return err == nil && r.Count == quota
	})

	// Every VM deleted through the centrals has its entry ended, none lost.
	for i, v := range createdVMs {
		fxMust(t, "DELETE", urls[i%2]+"/fleet/vms/"+v.Node+"/"+v.VM.ID, token, nil, http.StatusNoContent, nil)
	}
	es, err := st.EntriesForTenant(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != quota {
		t.Errorf("%d ledger entries after the deletes, want %d", len(es), quota)
	}
	for _, e := range es {
		if e.Running() || e.EndReason != "deleted" {
			t.Errorf("entry after the delete: %+v", e)
		}
	}

	// Without a quorum the centrals say so; with it back, they serve.
	down := []*etcdMember{members[0], members[1]}
	for _, m := range down {
		m.kill()
	}
	for _, u := range urls {
		if code, body := fxCall(t, "GET", u+"/healthz", "", nil); code != http.StatusServiceUnavailable {
			t.Errorf("%s/healthz with one member of three: %d %s, want 503", u, code, body)
		}
	}
	for _, m := range down {
		m.start()
	}
	for _, m := range down {
		m.waitReady(30 * time.Second)
	}
	for _, u := range urls {
		fxWait(t, "central serves with a quorum again", 20*time.Second, func() bool {
			code, _ := fxCall(t, "GET", u+"/healthz", "", nil)
			return code == http.StatusOK
		})
	}
}
