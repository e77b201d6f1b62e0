//! The comparison workload, drawn with the shared generator (`letus_workload::Rng`) so that every
//! system sees exactly the same keys, values and blocks.
//!
//! - `payment`: simple payments. Each transaction moves funds between two accounts, chosen 80/20 with
//!   `Rng::hot_account` (80% of picks fall on 20% of the accounts): 2 updates. Keys are `account-{i:010}`
//!   (the engine benchmark's keys).
//! - `erc20`: the same transfers inside one ERC-20 token contract: each updates the balance slots of sender and
//!   receiver. Keys are the contract address (20 bytes) followed by the Solidity mapping slot
//!   `keccak256(pad32(holder) ++ pad32(0))` (32 bytes), as in Ethereum's storage layout.
//!
//! A block holds `txs_per_block` transactions; an account touched twice in a block is written once, with its
//! last value, so a block has at most `2 * txs_per_block` updates. Values are 8-byte little-endian balances.

use std::collections::BTreeMap;

use letus_workload::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Kind {
    Payment,
    Erc20,
}

/// A fixed token contract address for the ERC-20 variant.
const TOKEN: [u8; 20] = *b"letus-bench-token-01";

pub fn key(kind: Kind, account: u64) -> Vec<u8> {
    match kind {
        Kind::Payment => format!("account-{account:010}").into_bytes(),
        Kind::Erc20 => {
            let mut pre = [0u8; 64];
            pre[24..32].copy_from_slice(&account.to_be_bytes());
            let slot = keccak_hash::keccak(pre).0;
            let mut k = Vec::with_capacity(52);
            k.extend_from_slice(&TOKEN);
            k.extend_from_slice(&slot);
            k
        }
    }
}

/// Balances and blocks of the workload.
pub struct Workload {
    pub kind: Kind,
    pub accounts: u64,
    pub txs_per_block: u64,
    rng: Rng,
    balances: Vec<u64>,
}

pub type Block = Vec<(Vec<u8>, Vec<u8>)>;

impl Workload {
    pub fn new(kind: Kind, accounts: u64, txs_per_block: u64, seed: u64) -> Workload {
        Workload {
            kind,
            accounts,
            txs_per_block,
            rng: Rng::new(seed),
            balances: vec![1_000_000; accounts as usize],
        }
    }

    /// The initial state in blocks of `per_block` accounts (every account with its starting balance).
    pub fn load_blocks(&self, per_block: u64) -> impl Iterator<Item = Block> + '_ {
        (0..self.accounts)
            .step_by(per_block as usize)
            .map(move |start| {
                let end = (start + per_block).min(self.accounts);
                let mut b: Block = (start..end)
                    .map(|a| {
                        (
                            key(self.kind, a),
                            self.balances[a as usize].to_le_bytes().to_vec(),
                        )
                    })
                    .collect();
                b.sort();
                b
            })
    }

    /// The next block of transfers: keys unique and sorted, each with its final balance in the block.
    pub fn next_block(&mut self) -> Block {
        let mut touched: BTreeMap<u64, ()> = BTreeMap::new();
        for _ in 0..self.txs_per_block {
            let from = self.rng.hot_account(self.accounts);
            let to = self.rng.hot_account(self.accounts);
            let amount = self.rng.below(100) + 1;
            let f = &mut self.balances[from as usize];
            let amount = amount.min(*f);
            *f -= amount;
            self.balances[to as usize] += amount;
            touched.insert(from, ());
            touched.insert(to, ());
        }
        let mut b: Block = touched
            .keys()
            .map(|&a| {
                (
                    key(self.kind, a),
                    self.balances[a as usize].to_le_bytes().to_vec(),
                )
            })
            .collect();
        b.sort();
        b
    }

    /// A uniformly random account's key, for reads.
    pub fn random_key(&mut self) -> Vec<u8> {
        key(self.kind, self.rng.below(self.accounts))
    }
}
