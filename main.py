"""genenv_pl entry point: python main.py {fit,validate,test,export} --config configs/<name>.yaml (--help for every key)"""
from genenv_pl.cli import cli_main

if __name__ == "__main__":
    cli_main()
