// Command exchange is the clinical data exchange service and its
// administration commands.
//
//	exchange [serve]            run the service (the default)
//	exchange seed [--flush]     load the demo data (idempotent)
//	exchange createsuperuser    create a superuser
//	exchange changepassword     set a user's password
//	exchange clients ...        register and list OAuth clients
//	exchange token create ...   print a bearer token for scripts
//	exchange invitation ...     print a patient's invitation link
//	exchange migrate            create the database indexes
//	exchange healthcheck        probe the local service (containers)
//	exchange import r4 ...      bulk R4 import into a running service
//	exchange load-study ...     a study's worth of data and searches, measured
//
// Settings come from environment variables; see docs/settings.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "exchange:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "exchange:", err)
		os.Exit(1)
	}
}

// usageError is a command line the program cannot make sense of.
type usageError string

func (e usageError) Error() string { return string(e) }

// stdio bundles what a command talks through: its streams and environment.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	getenv   func(string) string
}

// command is one subcommand: it parses its own flags from args.
type command func(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error

var commands = map[string]command{
	"serve":           serveCommand,
	"seed":            seedCommand,
	"createsuperuser": createSuperuserCommand,
	"changepassword":  changePasswordCommand,
	"clients":         clientsCommand,
	"token":           tokenCommand,
	"invitation":      invitationCommand,
	"migrate":         migrateCommand,
	"doctor":          doctorCommand,
	"healthcheck":     healthcheckCommand,
	"import":          importCommand,
	"ehr-brands":      ehrBrandsCommand,
	"load-study":      loadStudyCommand,
}

// run is the whole program: settings come through getenv and output goes to
// the given streams, so tests run it as users do.
func run(ctx context.Context, args []string, getenv func(string) string, in io.Reader, out, errOut io.Writer) error {
	name := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if name == "help" {
		fmt.Fprintln(out, usage)
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		return usageError(fmt.Sprintf("unknown command %q\n%s", name, usage))
	}
	s, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	return cmd(ctx, s, s.Log.NewLogger(errOut), stdio{in, out, errOut, getenv}, args)
}

const usage = `usage: exchange [command] [flags]

commands:
  serve            run the service (default)
  seed             load the demo data; --observations adds a month of readings, --flush empties the database first
  createsuperuser  create a superuser: --email E [--password P]
  changepassword   set a user's password, ending their sessions and tokens: --email E [--password P]
  clients          register | list | rotate-secret OAuth clients
  token create     print a bearer token: --email E [--ttl 24h] [--scopes "S ..."] [--patient N]
  invitation       print (or email) a patient's invitation link: --patient-id N [--client-id C] [--url U] [--replace-login]
  migrate          create the database indexes
  doctor           report and repair what interrupted writes left; --dry-run reports only
  healthcheck      exit 0 if the local service is live (/health) and ready (/ready); --live: /health only
  ehr-brands       import FILE [--vendor V]: a SMART User-access Brands Bundle; client: the exchange's registration at EHRs
  import r4        send R4 files to a running service: FILE|DIR... --source ID | --sources FILE
  load-study       send a study's worth of data to a running service, then measure its users' searches: [--patients N] [--days D]
  help             show this text

Run "exchange <command> -h" for a command's flags.`

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, io stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("exchange "+name, flag.ContinueOnError)
	fs.SetOutput(io.err)
	return fs
}

// parseFlags parses args, turning a bad command line into a usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0)))
	}
	return nil
}

// parseFlagsAndArgs parses args whose flags may come before, between or
// after the positional arguments (import r4 data/ --source 3), and
// returns the positional ones.
func parseFlagsAndArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(err)
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// flagError is a flag parsing error as the command reports it: -h asks
// for help, anything else is a usageError.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError(err.Error())
}
