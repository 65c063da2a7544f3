module github.com/sgtune/sgtune

go 1.26.8

require (
	github.com/c-bata/goptuna v0.9.0
	github.com/mattn/go-sqlite3 v1.14.53
	github.com/sashabaranov/go-openai v1.43.0
	github.com/spf13/cobra v1.10.2
	go.yaml.in/yaml/v3 v3.0.6
	gonum.org/v1/gonum v0.17.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
