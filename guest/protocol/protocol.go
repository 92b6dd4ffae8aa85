// Package protocol is the wire protocol between the FluxVM host and the guest agent
// (fluxvm-guest), and the host-side client that speaks it. Messages are JSON objects,
// one per '\n'-terminated line, over the virtio-serial port named PortName.
package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// PortName is the virtio-serial port name the guest agent listens on.
const PortName = "org.fluxvm.agent"

// ReadyLine is the line the agent prints on the serial console once its port is open;
// boot-time measurements and console watchers look for it.
const ReadyLine = "fluxvm-guest: ready"

// DisplayParam is the kernel command-line parameter by which the host tells the
// agent that the VM has a display: the agent then loads the display drivers and
// writes a banner on the screen. Headless VMs go without, so their boot pays nothing.
// (A parameter with a dot is not passed to init as an argument, nor reported as unknown.)
const DisplayParam = "fluxvm.display=1"

// MaxLineSize caps one encoded message (including its '\n'). Exec output is chunked
// well below it, so only a broken or hostile peer sends more.
const MaxLineSize = 1 << 20

// MaxChunk is the largest Data payload of one stdout or stderr message.
const MaxChunk = 32 << 10

// Operations a host may request.
const (
	OpPing     = "ping"     // answered by a "ready" message carrying Info
	OpExec     = "exec"     // run a command; answered by stdout/stderr chunks then "exit"
	OpSignal   = "signal"   // send a signal to a running exec's process group; answered by "ok"
	OpShutdown = "shutdown" // sync and power off; answered by "ok" (the connection then drops)
	OpReboot   = "reboot"   // sync and restart; answered by "ok"
	OpNetwork  = "network"  // configure interfaces, DNS and hostname; answered by "ok"
	OpDisks    = "disks"    // (re)make /dev/disk/by-id/virtio-<serial> links; answered by "ok"
)

// Message types the guest sends.
const (
	TypeReady  = "ready"  // agent is serving; sent with ID 0 when the port opens and in answer to ping
	TypeStdout = "stdout" // a chunk of an exec's standard output
	TypeStderr = "stderr" // a chunk of an exec's standard error
	TypeExit   = "exit"   // an exec ended; Code is its status (124 timeout, 128+N killed by signal N)
	TypeOK     = "ok"     // a shutdown, reboot, signal or network request succeeded
	TypeError  = "error"  // a request failed; Error says why
)

// Exit codes with a fixed meaning, as a shell would report them.
const (
	CodeTimeout     = 124 // the exec's TimeoutMS elapsed and its process group was killed
	CodeCannotRun   = 126 // the command exists but could not be started
	CodeNotFound    = 127 // the command was not found in PATH
	CodeSignalBase  = 128 // killed by signal N gives CodeSignalBase+N
	DefaultExecPath = "/bin:/sbin:/usr/bin:/usr/sbin"
)

// Request is one host-to-guest message.
type Request struct {
	// ID is chosen by the host and echoed by every message answering this request.
	ID uint64 `json:"id"`
	// Op is one of the Op* constants.
	Op string `json:"op"`
	// Exec is set for OpExec.
	Exec *ExecRequest `json:"exec,omitempty"`
	// Signal is set for OpSignal.
	Signal *Signal `json:"signal,omitempty"`
	// Network is set for OpNetwork.
	Network *NetworkConfig `json:"network,omitempty"`
}

// ExecRequest describes a command to run in the guest. Exactly one of Argv and Shell is set.
type ExecRequest struct {
	// Argv is the program and its arguments; the program is looked up in PATH.
	Argv []string `json:"argv,omitempty"`
	// Shell is a command line run with /bin/sh -c.
	Shell string `json:"shell,omitempty"`
	// Env holds extra KEY=VALUE entries; they override the agent's defaults (PATH, HOME).
	Env []string `json:"env,omitempty"`
	// Stdin is written to the command's standard input, which is then closed.
	Stdin []byte `json:"stdin,omitempty"`
	// TimeoutMS, when positive, kills the command's process group after that many
	// milliseconds; the exit then has Code 124.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Dir is the working directory; empty means /.
	Dir string `json:"dir,omitempty"`
}

// Validate reports whether the request can be run.
func (e *ExecRequest) Validate() error {
	switch {
	case e == nil:
		return errors.New("exec request missing")
	case len(e.Argv) > 0 && e.Shell != "":
		return errors.New("exec request sets both argv and shell; set exactly one")
	case len(e.Argv) == 0 && e.Shell == "":
		return errors.New("exec request sets neither argv nor shell; set exactly one")
	case len(e.Argv) > 0 && e.Argv[0] == "":
		return errors.New("exec request has an empty program name")
	case e.TimeoutMS < 0:
		return fmt.Errorf("exec timeout %d ms is negative", e.TimeoutMS)
	}
	return nil
}

// Signal asks the guest to signal a running exec.
type Signal struct {
	// ID is the ID of the exec request to signal.
	ID uint64 `json:"id"`
	// Signal is the Linux signal number (9 is SIGKILL).
	Signal int `json:"signal"`
}

// NetworkConfig is the guest network set-up.
type NetworkConfig struct {
	// Interfaces are matched to guest NICs by MAC address.
	Interfaces []Interface `json:"interfaces,omitempty"`
	// DNS servers written to /etc/resolv.conf (left alone when empty).
	DNS []string `json:"dns,omitempty"`
	// Hostname, when set, becomes the guest's hostname.
	Hostname string `json:"hostname,omitempty"`
}

// Interface configures one guest NIC.
type Interface struct {
	// MAC identifies the NIC, e.g. "52:54:00:12:34:56" (case does not matter).
	MAC string `json:"mac"`
	// Addresses in CIDR form, e.g. "10.0.2.15/24"; existing addresses are replaced.
	Addresses []string `json:"addresses,omitempty"`
	// Gateway, when set, becomes the default route through this NIC.
	Gateway string `json:"gateway,omitempty"`
	// MTU, when positive, is set on the NIC.
	MTU int `json:"mtu,omitempty"`
}

// Message is one guest-to-host message.
type Message struct {
	// ID is the ID of the request this answers; 0 for the unsolicited ready.
	ID uint64 `json:"id"`
	// Type is one of the Type* constants.
	Type string `json:"type"`
	// Data is the output chunk of a stdout or stderr message.
	Data []byte `json:"data,omitempty"`
	// Code is the exit status of an exit message.
	Code int `json:"code,omitempty"`
	// Error says what went wrong (error messages, and exits killed by their timeout).
	Error string `json:"error,omitempty"`
	// Info describes the guest in ready messages.
	Info *Info `json:"info,omitempty"`
}

// Info describes the guest and its agent.
type Info struct {
	AgentVersion string   `json:"agent_version"`
	Hostname     string   `json:"hostname"`
	Kernel       string   `json:"kernel"` // uname -r
	OS           string   `json:"os"`
	Uptime       float64  `json:"uptime"` // seconds since the guest kernel booted
	Interfaces   []string `json:"interfaces,omitempty"`
}

// ErrLineTooLong is returned by Decoder when a line exceeds MaxLineSize. The line is
// discarded and the decoder stays usable.
var ErrLineTooLong = fmt.Errorf("protocol line longer than %d bytes", MaxLineSize)

// Decoder reads '\n'-terminated lines from a stream. It is not safe for concurrent use.
type Decoder struct {
	r *bufio.Reader
}

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// ReadLine returns the next line without its '\n'. A final line without '\n' is returned
// as is; after it comes io.EOF. Over-long lines are skipped with ErrLineTooLong.
func (d *Decoder) ReadLine() ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		frag, err := d.r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > MaxLineSize {
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, ErrLineTooLong
			}
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case tooLong:
			return nil, ErrLineTooLong
		case len(line) > 0 && errors.Is(err, io.EOF):
			return line, nil
		default:
			return nil, err
		}
	}
}

// ReadMessage reads and decodes the next guest message. Decode errors are not fatal:
// the caller may read on.
func (d *Decoder) ReadMessage() (Message, error) {
	line, err := d.ReadLine()
	if err != nil {
		return Message{}, err
	}
	return DecodeMessage(line)
}

// ReadRequest reads and decodes the next host request. Decode errors are not fatal:
// the caller may read on.
func (d *Decoder) ReadRequest() (Request, error) {
	line, err := d.ReadLine()
	if err != nil {
		return Request{}, err
	}
	return DecodeRequest(line)
}

// DecodeMessage decodes one line (without its '\n') into a Message.
func DecodeMessage(line []byte) (Message, error) {
	var m Message
	if err := decodeObject(line, &m); err != nil {
		return Message{}, fmt.Errorf("decode guest message: %w", err)
	}
	if m.Type == "" {
		return Message{}, errors.New("decode guest message: missing \"type\"")
	}
	return m, nil
}

// DecodeRequest decodes one line (without its '\n') into a Request.
func DecodeRequest(line []byte) (Request, error) {
	var r Request
	if err := decodeObject(line, &r); err != nil {
		return Request{}, fmt.Errorf("decode host request: %w", err)
	}
	if r.Op == "" {
		return Request{}, errors.New("decode host request: missing \"op\"")
	}
	return r, nil
}

func decodeObject(line []byte, v any) error {
	line = bytes.TrimSpace(line)
	if len(line) > MaxLineSize {
		return ErrLineTooLong
	}
	if len(line) == 0 || line[0] != '{' {
		return fmt.Errorf("line is not a JSON object: %q", truncate(line, 40))
	}
	if err := json.Unmarshal(line, v); err != nil {
		return err
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// Encoder writes messages as JSON lines, one Write per line, safe for concurrent use.
type Encoder struct {
	mu sync.Mutex
	w  io.Writer
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes v (a Request or Message) as one line.
func (e *Encoder) Encode(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if len(b)+1 > MaxLineSize {
		return ErrLineTooLong
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err = e.w.Write(b)
	return err
}
