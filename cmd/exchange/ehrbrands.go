package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"exchange/domain"
)

// ehrBrandsCommand is `exchange ehr-brands import FILE [--vendor V]`, the
// import of a SMART User-access Brands Bundle (idempotent), and `exchange
// ehr-brands client (--brand ID | --vendor V) --client-id C [--public]`,
// the exchange's client registration at those EHRs (its secret from
// EHR_CLIENT_SECRET, never a flag: command lines are seen by others;
// without either, a secret set before is kept).
func ehrBrandsCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	if len(args) == 0 {
		return usageError("ehr-brands: want a subcommand: import FILE, or client")
	}
	sub, args := args[0], args[1:]
	fs := newFlags("ehr-brands "+sub, io)
	vendor := fs.String("vendor", "", "the EHR vendor of the brands (epic, ...): a vendor's client registration serves them")
	switch sub {
	case "import":
		files, err := parseFlagsAndArgs(fs, args)
		if err != nil {
			return err
		}
		if len(files) != 1 {
			return usageError("ehr-brands import: name one Brands Bundle file")
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			return err
		}
		a, err := openApp(ctx, s, log, true)
		if err != nil {
			return err
		}
		defer a.Close()
		counts, err := a.service.ImportEHRBrands(ctx, domain.SystemActor(), data, *vendor)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "EHR brands: %d in the Bundle (%d new, %d changed), %d facilities (%d new).\n",
			counts.Brands, counts.BrandsCreated, counts.BrandsUpdated, counts.Facilities, counts.FacilitiesCreated)
		if n := len(counts.Skipped); n > 0 {
			fmt.Fprintf(io.out, "%d Organizations skipped, the first: %s\n", n, counts.Skipped[0])
		}
		return nil
	case "client":
		brand := fs.Int64("brand", 0, "the brand the registration is of (else --vendor)")
		clientID := fs.String("client-id", "", "the client id the EHR registered the exchange under (required)")
		scopes := fs.String("scopes", "", "the resource scopes to ask for, space-separated (default: read access to each type pulled)")
		public := fs.Bool("public", false, "a public client (PKCE only): a secret set before is removed")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		a, err := openApp(ctx, s, log, true)
		if err != nil {
			return err
		}
		defer a.Close()
		change := domain.EHRClientChange{BrandID: *brand, Vendor: *vendor, ClientID: *clientID, Scopes: strings.Fields(*scopes)}
		switch secret := io.getenv("EHR_CLIENT_SECRET"); {
		case *public && secret != "":
			return usageError("ehr-brands client: --public takes no EHR_CLIENT_SECRET")
		case *public || secret != "":
			change.Secret = &secret // empty: none
		}
		c, err := a.service.SetEHRClient(ctx, domain.SystemActor(), change)
		if err != nil {
			return err
		}
		kind := "public (PKCE only)"
		if c.SealedSecret != nil {
			kind = "confidential (its secret sealed)"
		}
		fmt.Fprintf(io.out, "EHR client %s registered, %s.\n", c.ClientID, kind)
		return nil
	}
	return usageError(fmt.Sprintf("ehr-brands: unknown subcommand %q (import, client)", sub))
}
