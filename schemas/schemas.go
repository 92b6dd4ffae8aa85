// Package schemas holds the OpenAPI descriptions of FluxVM's HTTP APIs (the
// node API and central's fleet API) and checks live traffic against them.
// The servers' tests send every exchange through Check, which is how the
// servers, the descriptions and the SDK are kept from drifting apart.
package schemas

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The descriptions, by file name.
const (
	Node  = "node-openapi.yaml"
	Fleet = "fleet-openapi.yaml"
)

//go:embed node-openapi.yaml fleet-openapi.yaml
var files embed.FS

// Spec is one API description, ready to check exchanges against.
type Spec struct {
	Doc    *openapi3.T
	router routers.Router
	server *url.URL // the spec's own server: requests are routed as if sent there
}

var registerPNG sync.Once

// Load reads and validates one of the descriptions.
func Load(name string) (*Spec, error) {
	registerPNG.Do(func() {
		openapi3filter.RegisterBodyDecoder("image/png", openapi3filter.FileBodyDecoder)
		// Pages for browsers (the sign-up's confirmation page) are checked
		// as strings.
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
		// Progress streams (image pull and push) are checked as the array
		// of their lines.
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder)
	})
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("%s is not valid OpenAPI: %w", name, err)
	}
	if len(doc.Servers) == 0 {
		return nil, fmt.Errorf("%s names no server", name)
	}
	server, err := url.Parse(doc.Servers[0].URL)
	if err != nil {
		return nil, fmt.Errorf("%s: server: %w", name, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", name, err)
	}
	return &Spec{Doc: doc, router: router, server: server}, nil
}

// options: every status must be listed, every problem reported, and a
// bearer token present where the spec asks for one.
var options = &openapi3filter.Options{
	IncludeResponseStatus: true,
	MultiError:            true,
	AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		h := in.RequestValidationInput.Request.Header.Get("Authorization")
		if !strings.HasPrefix(h, "Bearer ") || len(h) == len("Bearer ") {
			return errors.New("no bearer token")
		}
		return nil
	},
}

// Check holds one exchange to the spec: req (sent to any address) with its
// body, and the answer. requestErr says whether the request matched (tests
// send bad ones on purpose); responseErr whether the answer did: on a route
// of the spec the status must be listed and the body must match its
// schema, and any other path must answer the spec's error body.
func (s *Spec) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) (requestErr, responseErr error) {
	ctx := context.Background()
	probe := req.Clone(ctx)
	probe.URL.Scheme, probe.URL.Host, probe.Host = s.server.Scheme, s.server.Host, s.server.Host
	probe.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := s.router.FindRoute(probe)
	if err != nil {
		requestErr = fmt.Errorf("no such route in the spec: %w", err)
		var v any
		switch {
		case json.Unmarshal(body, &v) != nil:
			responseErr = fmt.Errorf("%d: the body is not JSON", status)
		case status < 400:
			responseErr = fmt.Errorf("%d for a path outside the spec", status)
		default:
			responseErr = s.Doc.Components.Schemas["Error"].Value.VisitJSON(v)
		}
		return requestErr, responseErr
	}
	in := &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route, Options: options}
	requestErr = openapi3filter.ValidateRequest(ctx, in)
	responseErr = openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: options,
	})
	return requestErr, responseErr
}

// ndjsonDecoder reads newline-delimited JSON as an array of its lines.
func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	out := []any{}
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("line %d of the stream: %w", len(out)+1, err)
		}
		out = append(out, v)
	}
}
