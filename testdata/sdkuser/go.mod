module example.com/sdkuser

go 1.26.0

require github.com/codumentor/codumentor/sandboxkit v0.0.0

require golang.org/x/sys v0.50.0 // indirect

replace github.com/codumentor/codumentor/sandboxkit => ../../sandboxkit
