module github.com/codumentor/codumentor/agentcore

go 1.26.0

// The SDK lives in this repository; see the root go.mod.
replace github.com/codumentor/codumentor/sandboxkit => ../sandboxkit
