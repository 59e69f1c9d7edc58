// Package learnt keeps what an adaptive gateway learnt across its restarts:
// the cap it held, the engine and targets it was learnt on, and a summary of
// the model, in a JSON file the operator names (KNEECAP_STATE_FILE).
//
// [Save] writes the file atomically (a temporary file in the same
// directory, synced, then renamed over the old one), so a crash leaves the
// old file or the new one, never half of either. [Load] reads it back and
// checks it against the gateway that starts: a missing, stale (older than
// the operator's bound), foreign (another engine, other targets) or corrupt
// file is an error that says which, and the gateway logs it in one line and
// starts cold; never a crash or a wrong cap.
//
// The package owns no state: the gateway owns the file and decides when to
// write it (every SaveInterval and once at its end). Several gateways may
// write one file (a fleet on a shared volume): each writes its own
// temporary file and renames it, so the last rename wins and a reader
// gets one whole state.
package learnt
