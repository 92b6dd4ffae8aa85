package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecoderSplitsLinesAndSkipsOverlongOnes(t *testing.T) {
	long := strings.Repeat("x", MaxLineSize+10)
	in := `{"id":1,"type":"ready"}` + "\n" + long + "\n" + `{"id":2,"type":"ok"}` + "\n" + `{"id":3,"type":"exit","code":3}`
	d := NewDecoder(strings.NewReader(in))

	m, err := d.ReadMessage()
	if err != nil || m.ID != 1 || m.Type != TypeReady {
		t.Fatalf("first message = %+v, %v", m, err)
	}
	if _, err := d.ReadMessage(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("overlong line: err = %v, want ErrLineTooLong", err)
	}
	if m, err := d.ReadMessage(); err != nil || m.ID != 2 {
		t.Fatalf("message after overlong line = %+v, %v; the decoder must recover", m, err)
	}
	if m, err := d.ReadMessage(); err != nil || m.ID != 3 || m.Code != 3 {
		t.Fatalf("unterminated last line = %+v, %v", m, err)
	}
	if _, err := d.ReadMessage(); !errors.Is(err, io.EOF) {
		t.Fatalf("after last line: err = %v, want EOF", err)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, tc := range []struct {
		name, line, wantErr string
	}{
		{"empty", "", "not a JSON object"},
		{"not json", "hello", "not a JSON object"},
		{"array", "[1,2]", "not a JSON object"},
		{"truncated", `{"id":1,"type":"ok"`, "unexpected end"},
		{"missing type", `{"id":1}`, `missing "type"`},
		{"wrong field type", `{"id":"one","type":"ok"}`, "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeMessage([]byte(tc.line))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("DecodeMessage(%q) err = %v, want one containing %q", tc.line, err, tc.wantErr)
			}
		})
	}
	if _, err := DecodeRequest([]byte(`{"id":1}`)); err == nil || !strings.Contains(err.Error(), `missing "op"`) {
		t.Fatalf("request without op: err = %v", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	req := Request{ID: 7, Op: OpExec, Exec: &ExecRequest{Shell: "echo 'a\nb'", Stdin: []byte{0, 1, '\n'}, TimeoutMS: 5}}
	if err := NewEncoder(&buf).Encode(req); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("encoded request spans several lines: %q", buf.String())
	}
	got, err := NewDecoder(&buf).ReadRequest()
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != 7 || got.Exec.Shell != req.Exec.Shell || !bytes.Equal(got.Exec.Stdin, req.Exec.Stdin) || got.Exec.TimeoutMS != 5 {
		t.Fatalf("round trip = %+v, want %+v", got.Exec, req.Exec)
	}
}

func TestExecRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *ExecRequest
		ok   bool
	}{
		{"argv", &ExecRequest{Argv: []string{"true"}}, true},
		{"shell", &ExecRequest{Shell: "true"}, true},
		{"nil", nil, false},
		{"neither", &ExecRequest{}, false},
		{"both", &ExecRequest{Argv: []string{"true"}, Shell: "true"}, false},
		{"empty program", &ExecRequest{Argv: []string{""}}, false},
		{"negative timeout", &ExecRequest{Shell: "true", TimeoutMS: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.req.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// fuzzLines feeds data through the decoder the way the agent and client read it.
func fuzzLines(t *testing.T, data []byte, decode func([]byte) error) {
	d := NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		line, err := d.ReadLine()
		if errors.Is(err, io.EOF) {
			return
		}
		if errors.Is(err, ErrLineTooLong) {
			continue
		}
		if err != nil {
			t.Fatalf("ReadLine: unexpected error %v", err)
		}
		if len(line) > MaxLineSize {
			t.Fatalf("line of %d bytes passed the %d cap", len(line), MaxLineSize)
		}
		if err := decode(line); err != nil && err.Error() == "" {
			t.Fatal("decode error without a message")
		}
		if i > len(data)+1 {
			t.Fatal("decoder does not make progress")
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"id":1,"type":"stdout","data":"aGk="}` + "\n"))
	f.Add([]byte(`{"id":0,"type":"ready","info":{"kernel":"6.1"}}`))
	f.Add([]byte("\n\n{\n}garbage\x00\xff"))
	f.Add([]byte(`{"id":-1,"type":"exit","code":1e99}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzLines(t, data, func(line []byte) error {
			m, err := DecodeMessage(line)
			if err == nil && m.Type == "" {
				t.Fatal("decoded a message without a type")
			}
			return err
		})
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"id":1,"op":"exec","exec":{"argv":["ls"],"stdin":"AA=="}}` + "\n"))
	f.Add([]byte(`{"id":2,"op":"network","network":{"interfaces":[{"mac":"x"}]}}`))
	f.Add([]byte(`{"op":"signal","signal":{"id":1,"signal":9}}` + "\n" + `{"op":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzLines(t, data, func(line []byte) error {
			r, err := DecodeRequest(line)
			if err == nil && r.Op == "" {
				t.Fatal("decoded a request without an op")
			}
			if err == nil && r.Exec != nil {
				_ = r.Exec.Validate()
			}
			return err
		})
	})
}
