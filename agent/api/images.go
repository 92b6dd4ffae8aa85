package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// withImages refuses the image routes on a node built without an image
// directory (an embedding that did not give Options.Images).
func (s *server) withImages(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Images == nil {
			jsonapi.WriteError(w, http.StatusNotFound, "this node has no image directory", "run the node with fluxvm-agent node; its first policy.allowed_image_dirs entry is where images are pulled")
			return
		}
		h(w, r)
	}
}

func (s *server) listImages(w http.ResponseWriter, r *http.Request) {
	list, err := s.opts.Images.List()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, list)
}

// imageFail answers a refusal that came before the stream began.
func (s *server) imageFail(w http.ResponseWriter, r *http.Request, err error) {
	var e *jsonapi.Error
	if errors.As(err, &e) {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	s.fail(w, r, err)
}

// stream answers 200 with one JSON line per progress report, flushed as it
// comes, and ends with "done" (from final) or "error".
func (s *server) imageStream(w http.ResponseWriter, r *http.Request, what string, run func(emit func(sdk.ImageProgress)) (sdk.ImageProgress, error)) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	emit := func(p sdk.ImageProgress) {
		_ = enc.Encode(p)
		_ = rc.Flush()
	}
	final, err := run(emit)
	if err != nil {
		var e *jsonapi.Error
		if !errors.As(err, &e) {
			s.log.Error("image "+what+" failed", "error", err)
			e = &jsonapi.Error{Status: http.StatusInternalServerError, Msg: "internal error",
				Hint: "the node agent's log has the details; retry, and report it if it persists"}
		} else {
			s.log.Warn("image "+what+" refused", "error", e.Msg)
		}
		emit(sdk.ImageProgress{Phase: "error", Status: e.Status, Error: e.Msg, Hint: e.Hint, ETASeconds: -1})
		return
	}
	final.Phase = "done"
	emit(final)
}

func (s *server) pullImage(w http.ResponseWriter, r *http.Request) {
	var req sdk.ImagePullRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	p, err := s.opts.Images.PreparePull(r.Context(), req)
	if err != nil {
		s.imageFail(w, r, err)
		return
	}
	defer p.Close()
	s.log.Info("image pull", "ref", jsonapi.Echo(req.Ref), "image", p.Name())
	s.imageStream(w, r, "pull", func(emit func(sdk.ImageProgress)) (sdk.ImageProgress, error) {
		img, err := p.Run(r.Context(), emit)
		if err != nil {
			return sdk.ImageProgress{}, err
		}
		return sdk.ImageProgress{Image: img, Digest: img.Digest, BytesDone: img.SizeBytes, BytesTotal: img.SizeBytes}, nil
	})
}

func (s *server) pushImage(w http.ResponseWriter, r *http.Request) {
	var req sdk.ImagePushRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	p, err := s.opts.Images.PreparePush(r.Context(), req)
	if err != nil {
		s.imageFail(w, r, err)
		return
	}
	s.log.Info("image push", "ref", jsonapi.Echo(req.Ref), "image", jsonapi.Echo(req.Image))
	s.imageStream(w, r, "push", func(emit func(sdk.ImageProgress)) (sdk.ImageProgress, error) {
		digest, err := p.Run(r.Context(), emit)
		return sdk.ImageProgress{Digest: digest}, err
	})
}
