package interop

// This file holds the published rows docs/failoverbench.md prints beside
// ours: failoverbench's results/full/SCORECARD.md of 2026-09-12 (profile
// full, methodology v0.1), the revision that scores Bifrost's released
// image v2.1.1. Each cell is the scorecard's verdict and its line under it
// (attempts the wall saw on the primary / fallback model, the gap between
// the first two primary attempts, the call's time), copied as printed.

// fbPublishedRow is one system's published column.
type fbPublishedRow struct {
	name  string
	cells [16]fbPublishedCell // in the catalogue's order
	// totals are the scorecard's own pass / partial / safe / fail counts,
	// checked against the cells.
	totals [4]int
}

// fbPublishedCell is one published cell.
type fbPublishedCell struct {
	verdict fbVerdict
	detail  string
}

// fbPublished is the rows the issue compares with, in the scorecard's
// order of mention: the SDK without fallback, the three gateways, the
// reference client.
var fbPublished = []fbPublishedRow{
	{name: "openai-python SDK (built-in retries)", totals: [4]int{6, 0, 10, 0}, cells: [16]fbPublishedCell{
		{fbPass, "2p/0f · gap 2.0s · 3.3s"},
		{fbSafe, "3p/0f · gap 0.5s · 1.4s"},
		{fbPass, "2p/0f · gap 0.5s · 1.5s"},
		{fbSafe, "3p/0f · gap 0.5s · 1.4s"},
		{fbPass, "2p/0f · gap 0.4s · 1.4s"},
		{fbSafe, "3p/0f · gap 30.5s · 91.6s"},
		{fbPass, "1p/0f · 21.0s"},
		{fbSafe, "1p/0f · 0.6s"},
		{fbSafe, "1p/0f · 30.3s"},
		{fbSafe, "1p/0f · 0.2s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbSafe, "1p/0f · 0.0s"},
		{fbPass, "1p/0f · 0.0s"},
		{fbSafe, "1p/0f · 0.6s"},
		{fbSafe, "0/15 served in outage · back on primary +0s"},
		{fbSafe, "3p/0f · gap 0.4s · 1.3s"},
	}},
	{name: "LiteLLM Router (in-process)", totals: [4]int{9, 3, 4, 0}, cells: [16]fbPublishedCell{
		{fbPass, "2p/0f · gap 2.7s · 4.0s"},
		{fbPass, "3p/1f · gap 0.6s · 5.3s"},
		{fbPass, "2p/0f · gap 0.7s · 1.7s"},
		{fbPass, "3p/1f · gap 0.9s · 5.8s"},
		{fbPass, "2p/0f · gap 0.8s · 1.8s"},
		{fbPartial, "3p/1f · gap 30.8s · 96.2s"},
		{fbPartial, "1p/0f · 21.0s"},
		{fbSafe, "1p/0f · 0.7s"},
		{fbSafe, "1p/0f · 30.3s"},
		{fbSafe, "1p/0f · 0.2s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/1f · 1.0s"},
		{fbPartial, "1p/1f · 1.0s"},
		{fbSafe, "1p/0f · 0.7s"},
		{fbPass, "11/11 served in outage · back on primary +2s"},
		{fbPass, "3p/1f · gap 0.9s · 5.7s"},
	}},
	{name: "Bifrost v2.1.1 (Docker)", totals: [4]int{9, 3, 3, 1}, cells: [16]fbPublishedCell{
		{fbPartial, "2p/0f · gap 0.6s · 1.6s"},
		{fbPass, "3p/1f · gap 0.4s · 2.5s"},
		{fbPass, "2p/0f · gap 0.4s · 1.4s"},
		{fbPass, "3p/1f · gap 0.5s · 2.6s"},
		{fbPass, "2p/0f · gap 0.0s · 1.0s"},
		{fbFail, "2p/0f · gap 120.0s · 130.0s"},
		{fbPartial, "1p/0f · 21.0s"},
		{fbSafe, "1p/0f · 0.7s"},
		{fbSafe, "1p/0f · 30.3s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/1f · 1.0s"},
		{fbPartial, "1p/1f · 1.0s"},
		{fbSafe, "1p/0f · 0.7s"},
		{fbPass, "15/15 served in outage · back on primary +0s"},
		{fbPass, "3p/1f · gap 0.5s · 2.6s"},
	}},
	{name: "Portkey Gateway (Docker, OSS)", totals: [4]int{11, 2, 0, 3}, cells: [16]fbPublishedCell{
		{fbPass, "2p/0f · gap 2.0s · 3.0s"},
		{fbPass, "3p/1f · gap 1.0s · 4.0s"},
		{fbPass, "2p/0f · gap 1.0s · 2.0s"},
		{fbPass, "3p/1f · gap 1.0s · 4.0s"},
		{fbPass, "2p/0f · gap 1.0s · 2.0s"},
		{fbPass, "1p/1f · 31.0s"},
		{fbPartial, "1p/0f · 21.0s"},
		{fbFail, "1p/0f · 0.7s · TRUNCATED"},
		{fbFail, "1p/0f · 30.3s · TRUNCATED"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/1f · 1.0s"},
		{fbPartial, "1p/1f · 1.0s"},
		{fbFail, "1p/0f · 0.7s · TRUNCATED"},
		{fbPass, "15/15 served in outage · back on primary +0s"},
		{fbPass, "3p/1f · gap 1.0s · 4.0s"},
	}},
	{name: "Reference client (httpx)", totals: [4]int{16, 0, 0, 0}, cells: [16]fbPublishedCell{
		{fbPass, "2p/0f · gap 2.0s · 3.0s"},
		{fbPass, "3p/1f · gap 0.5s · 2.4s"},
		{fbPass, "2p/0f · gap 0.5s · 1.5s"},
		{fbPass, "3p/1f · gap 0.4s · 2.2s"},
		{fbPass, "2p/0f · gap 0.5s · 1.5s"},
		{fbPass, "1p/1f · 11.0s"},
		{fbPass, "1p/1f · 11.0s"},
		{fbPass, "3p/1f · gap 1.2s · 4.3s"},
		{fbPass, "1p/1f · 11.3s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/0f · 1.0s"},
		{fbPass, "1p/1f · 1.0s"},
		{fbPass, "1p/0f · 0.0s"},
		{fbPass, "3p/1f · gap 1.2s · 4.6s"},
		{fbPass, "15/15 served in outage · back on primary +0s"},
		{fbPass, "3p/1f · gap 0.6s · 2.7s"},
	}},
}
