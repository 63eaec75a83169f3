//go:build race

package office

// raceEnabled: the race detector's runtime maps terabytes of shadow
// memory, so a worker built with it cannot run under an address-space
// limit (tests run the test binary as the worker).
const raceEnabled = true
