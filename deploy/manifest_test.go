package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManifestFilesDecodeStrictly reads every YAML file under kubernetes/ as
// written (base resources, components' patches, kustomizations) into its API
// type, so that a field kustomize would carry through to the API server
// unnoticed fails here first.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	root := filepath.Join(repoRoot(t), "deploy", "kubernetes")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, doc := range yamlDocs(readFile(t, path)) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s (document %d): %v", rel, i+1, err)
				continue
			}
			n++
			if k, ok := obj.(*kustomization); ok {
				checkKustomizationRefs(t, filepath.Dir(path), rel, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("decoded only %d objects under %s", n, root)
	}
}

// checkKustomizationRefs requires every file or folder a kustomization names
// to exist, and a Component to be named only under components:.
func checkKustomizationRefs(t *testing.T, dir, rel string, k *kustomization) {
	t.Helper()
	var refs []string
	refs = append(refs, k.Resources...)
	refs = append(refs, k.Components...)
	for _, p := range k.Patches {
		if p.Path != "" {
			refs = append(refs, p.Path)
		}
	}
	for _, r := range refs {
		if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
			t.Errorf("%s names %q: %v", rel, r, err)
		}
	}
	if filepath.Base(rel) == "kustomization.yaml" {
		for _, c := range k.Components {
			b := readFile(t, filepath.Join(dir, c, "kustomization.yaml"))
			if !strings.Contains(string(b), "kind: Component") {
				t.Errorf("%s: %q under components: is not a kustomize Component", rel, c)
			}
		}
	}
}
