module github.com/codumentor/codumentor/agentcore

go 1.26.0

require github.com/codumentor/codumentor/sandboxkit v0.0.0

require golang.org/x/sys v0.50.0 // indirect

// The SDK lives in this repository; see the root go.mod.
replace github.com/codumentor/codumentor/sandboxkit => ../sandboxkit
