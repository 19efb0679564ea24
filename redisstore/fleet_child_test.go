package redisstore_test

import "github.com/llmretry/llmretry/redisstore/internal/fleet"

// isFleetChild reports whether the fleet test started this binary as one
// of its processes.
func isFleetChild() bool { return fleet.IsChild() }

// fleetChild runs that process's calls and returns its exit code.
func fleetChild() int { return fleet.Child() }
