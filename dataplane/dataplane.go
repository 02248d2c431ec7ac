package dataplane

import "context"

// Dataplane programs States into something that moves packets.
type Dataplane interface {
	// Name identifies the implementation in logs and metrics.
	Name() string
	// Sync makes the dataplane forward as s says. It may diff against what
	// it last programmed; after a failed Sync the previous programming
	// stays in force and the next Sync must program everything.
	Sync(ctx context.Context, s *State) error
	// Cleanup removes everything the dataplane owns.
	Cleanup(ctx context.Context) error
}
