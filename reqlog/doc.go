// Package reqlog writes the gateway's request log: one JSON line per
// generation request that ended (answered, refused or failed), which an
// operator can keep, read and replay (`kneecap bench --trace`, package
// trace). A line holds what was measured and judged, and a prefix
// fingerprint of the prompt (hashes of its leading blocks), never its
// text; the tenant only as a hash.
//
// # Overview
//
//   - line.go: [Line], the schema of one line, and [FromRecord], which
//     makes one from an slo.Record.
//   - log.go: [Log], a proxy.Observer whose Done hands the record to a
//     bounded channel without blocking (a full channel drops the record
//     and counts it), and [Log.Run], the one writer goroutine: it encodes
//     each record, appends it to the current file and rotates the file
//     before it would pass [Config].MaxBytes, keeping [Config].Files
//     rotated files (path.1 the newest), so the log never holds more than
//     (Files + 1) x MaxBytes bytes.
//
// # Concurrency model
//
// Done may be called from any number of goroutines (the proxy's request
// goroutines); it never blocks and never touches the file. Run is the only
// goroutine that encodes, writes, rotates and closes files. When Run's
// context ends it writes what the channel still holds, flushes and closes
// the file, and returns; records handed to Done after that are dropped and
// counted.
//
// # Ownership
//
// The Log owns its channel, its counters and (inside Run) its files.
// Records are copied into the channel; the prefix hashes they point to are
// never written after the proxy hands the record over.
package reqlog
