module github.com/redrivehq/redrive

go 1.26
