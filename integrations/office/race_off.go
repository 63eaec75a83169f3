//go:build !race

package office

const raceEnabled = false
