module github.com/codumentor/codumentor

go 1.26.0

require (
	github.com/codumentor/codumentor/agentcore v0.0.0
	github.com/codumentor/codumentor/sandboxkit v0.0.0
	github.com/sashabaranov/go-openai v1.43.0
	github.com/urfave/cli/v3 v3.14.0
)

require golang.org/x/sys v0.50.0 // indirect

// The SDK lives in this repository; go.work uses it too, the replace lets
// single-module commands (go mod tidy, GOWORK=off) resolve it without a proxy.
replace github.com/codumentor/codumentor/sandboxkit => ./sandboxkit

// The engine lives in this repository too, resolved the same way.
replace github.com/codumentor/codumentor/agentcore => ./agentcore
