package keys

import (
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Wire is a key as the API shows it (sdk.APIKey): the record's sdk.APIKey,
// that is everything but whose it is and its digest. Every answer that
// shows a key is built here.
func Wire(k store.APIKey) sdk.APIKey { return k.APIKey }
