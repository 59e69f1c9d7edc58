// Package fleet holds the fleet tests: N replicas, each a simulated engine
// with kneecap beside it, behind real nginx and real HAProxy from Debian's
// packages configured as docs/operating.md shows (deploy/fleet), against
// one replica alone in the same run.
package fleet
