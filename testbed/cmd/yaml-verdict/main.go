// Command yaml-verdict is test tooling: for each file named on the command line it prints
// "<file>\t<ok|refused>" as kubectl's YAML reader (sigs.k8s.io/yaml, go-yaml underneath)
// judges every document of it, so our reader's verdicts on odd-but-valid YAML
// (fixtures/yaml-odd) can be compared with the API's own clients'.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func verdict(data []byte) error {
	// kubectl splits a stream into documents, then converts each to JSON.
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var v interface{}
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return err
		}
	}
}

func main() {
	for _, file := range os.Args[1:] {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := verdict(data); err != nil {
			fmt.Printf("%s\trefused\t%v\n", file, err)
		} else {
			fmt.Printf("%s\tok\n", file)
		}
	}
}
