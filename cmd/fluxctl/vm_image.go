package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// registryFlags are the sign-in flags pull and push share. The password
// never comes from a flag (shell history, ps): from stdin or the
// environment.
type registryFlags struct {
	username      string
	passwordStdin bool
	insecure      bool
}

func (f *registryFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.username, "username", "", "registry user name; the password comes from --password-stdin or $FLUXVM_REGISTRY_PASSWORD")
	c.Flags().BoolVar(&f.passwordStdin, "password-stdin", false, "read the registry password (or token) from stdin")
	c.Flags().BoolVar(&f.insecure, "insecure", false, "plain HTTP to a registry that is not on loopback")
}

func (a *app) registryAuth(f *registryFlags) (sdk.RegistryAuth, error) {
	secret := a.getenv("FLUXVM_REGISTRY_PASSWORD")
	if f.passwordStdin {
		line, err := bufio.NewReader(io.LimitReader(a.stdin, sdk.MaxRegistrySecretLen+2)).ReadString('\n')
		if err != nil && err != io.EOF {
			return sdk.RegistryAuth{}, fmt.Errorf("read the password from stdin: %w", err)
		}
		secret = strings.TrimRight(line, "\r\n")
	}
	if f.username == "" {
		f.username = a.getenv("FLUXVM_REGISTRY_USERNAME")
	}
	if f.username == "" {
		return sdk.RegistryAuth{Token: secret}, nil
	}
	if secret == "" {
		return sdk.RegistryAuth{}, &cliError{msg: "--username needs a password",
			hint: "pipe it in with --password-stdin, or set FLUXVM_REGISTRY_PASSWORD"}
	}
	return sdk.RegistryAuth{Username: f.username, Password: secret}, nil
}

func (a *app) vmImageCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "vm-image",
		Short: "Pull VM images from an OCI registry onto a node, or publish them",
		Long: `Move VM image bundles between a node and an OCI registry, through the node API.

A FluxVM image in a registry is an OCI artifact: its config is the bundle's
fluxvm-image.json and its layers are the kernel, initramfs and disk files
(docs/images.md). A pull lands in the node's image directory (the first of its
policy.allowed_image_dirs), resumes where an interrupted pull stopped and
installs nothing whose digest does not match.`,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(a.vmImagePull(), a.vmImagePush(), a.vmImageList())
	return c
}

func (a *app) vmImagePull() *cobra.Command {
	var (
		rf   registryFlags
		name string
	)
	c := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image onto the node",
		Example: `  fluxctl vm-image pull registry.example:5000/fluxvm/debian-minimal:12
  echo "$PAT" | fluxctl vm-image pull registry.example/team/ci:7 --username ci --password-stdin --name ci-7`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(c, fmt.Sprintf("vm-image pull takes one reference, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			auth, err := a.registryAuth(&rf)
			if err != nil {
				return err
			}
			bar := a.progressBar("pull")
			img, err := nc.PullImage(c.Context(), sdk.ImagePullRequest{Ref: args[0], Name: name, Insecure: rf.insecure, RegistryAuth: auth}, bar.update)
			bar.finish()
			if err != nil {
				return err
			}
			if !a.human() {
				return a.printRaw(img)
			}
			a.done("fluxctl vm create NAME --image "+img.Path, "Pulled %s as image %s (%s, %s) into %s", args[0], img.Name, img.Digest, sizeOf(img.SizeBytes), img.Path)
			return nil
		}),
	}
	rf.add(c)
	c.Flags().StringVar(&name, "name", "", "the image's name on the node (default: the name in its metadata)")
	return c
}

func (a *app) vmImagePush() *cobra.Command {
	var rf registryFlags
	c := &cobra.Command{
		Use:   "push IMAGE REF",
		Short: "Publish one of the node's images to a registry",
		Long: `Publish an image bundle of the node to a registry as a FluxVM OCI artifact.
IMAGE is an image's name in the node's image directory (fluxctl vm-image list)
or the absolute path of a bundle directory under its allowed image directories.`,
		Example: `  fluxctl vm-image push debian-minimal registry.example:5000/fluxvm/debian-minimal:12`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError(c, fmt.Sprintf("vm-image push takes an image and a reference, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			auth, err := a.registryAuth(&rf)
			if err != nil {
				return err
			}
			bar := a.progressBar("push")
			digest, err := nc.PushImage(c.Context(), sdk.ImagePushRequest{Image: args[0], Ref: args[1], Insecure: rf.insecure, RegistryAuth: auth}, bar.update)
			bar.finish()
			if err != nil {
				return err
			}
			if !a.human() {
				return a.printRaw(map[string]string{"ref": args[1], "digest": digest})
			}
			a.done("fluxctl vm-image pull "+args[1]+" (on another node)", "Pushed %s to %s (%s)", args[0], args[1], digest)
			return nil
		}),
	}
	rf.add(c)
	return c
}

func nodeImageColumns() []column[sdk.NodeImage] {
	return []column[sdk.NodeImage]{
		{name: "name", header: "NAME", value: func(i *sdk.NodeImage) string { return i.Name }},
		{name: "os", header: "OS", value: func(i *sdk.NodeImage) string { return i.GuestOS }},
		{name: "size", header: "SIZE", value: func(i *sdk.NodeImage) string { return sizeOf(i.SizeBytes) }},
		{name: "ref", header: "FROM", value: func(i *sdk.NodeImage) string { return i.Ref }},
		{name: "digest", header: "DIGEST", wide: true, value: func(i *sdk.NodeImage) string { return i.Digest }},
		{name: "path", header: "PATH", wide: true, value: func(i *sdk.NodeImage) string { return i.Path }},
	}
}

func (a *app) vmImageList() *cobra.Command {
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the images in the node's image directory",
		Args:    cobra.NoArgs,
		RunE: a.withNode(func(c *cobra.Command, _ []string, nc *sdk.NodeClient) error {
			imgs, err := nc.Images(c.Context())
			if err != nil {
				return err
			}
			return show(a, c, table[sdk.NodeImage]{raw: imgs, rows: imgs, cols: nodeImageColumns(),
				empty: "no images on node " + nc.URL() + "\nnext: fluxctl vm-image pull REF\n"})
		}),
	}
	columnsFlag(c, nodeImageColumns())
	return c
}

// transferBar draws a pull's or push's progress on a terminal's stderr:
// bytes, rate and time left, on one line redrawn in place.
type transferBar struct {
	a     *app
	verb  string
	drawn bool
}

func (a *app) progressBar(verb string) *transferBar { return &transferBar{a: a, verb: verb} }

func (b *transferBar) update(p sdk.ImageProgress) {
	if !b.a.stderrTTY || p.Phase == "error" {
		return
	}
	eta := "ETA ?"
	if p.ETASeconds >= 0 {
		eta = "ETA " + short(time.Duration(p.ETASeconds)*time.Second)
	}
	line := fmt.Sprintf("%s %s / %s  %s/s  %s", b.verb, sizeOf(p.BytesDone), sizeOf(p.BytesTotal), sizeOf(p.BytesPerSecond), eta)
	if p.ResumedBytes > 0 {
		line += fmt.Sprintf("  (resumed %s)", sizeOf(p.ResumedBytes))
	}
	if p.File != "" {
		line += "  " + p.File
	}
	fmt.Fprintf(b.a.stderr, "\r\x1b[K%s", line)
	b.drawn = true
}

func (b *transferBar) finish() {
	if b.drawn {
		fmt.Fprint(b.a.stderr, "\r\x1b[K")
	}
}

// sizeOf says a byte count in the largest binary unit under 1024 of it.
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
