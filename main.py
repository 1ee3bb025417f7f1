"""genenv_pl entry point: python main.py {fit,validate,test} --config configs/<name>.yaml"""
from genenv_pl.cli import cli_main

if __name__ == "__main__":
    cli_main()
