module github.com/codumentor/codumentor/agentcore

go 1.26
