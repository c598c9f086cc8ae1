module github.com/forgeml/forge

go 1.25.0

require (
	github.com/ebitengine/purego v0.11.3
	golang.org/x/sys v0.47.0
	pgregory.net/rapid v1.3.0
)
